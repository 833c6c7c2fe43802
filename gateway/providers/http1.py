"""A lean HTTP/1.1 client for calls to model providers: an asyncio protocol over llhttp.

Why not aiohttp on this path: a gateway makes one upstream call per model call, and measured
here (bench/README.md, callgrind) aiohttp's client spent about a quarter of the gateway's CPU
per request in its own machinery (request and response objects, multidicts, trace hooks,
stream readers, per-call timers). Calls to an LLM API need much less: a POST whose body is
already bytes, keep-alive connections per origin, a response framed by Content-Length,
chunked encoding or connection close, gzip/deflate, connect and read timeouts, TLS. That is
what this module does, with the response parsed by ``httptools`` (llhttp, the parser uvicorn
and Node use). Bifrost makes the same choice in Go (fasthttp instead of net/http).

Failures surface as canonical ``ProviderError``s. POSTs are never resent on another
connection: a request that fails after it was written may have reached the model, and the
router decides about retries (as aiohttp does for non-idempotent methods).
"""

from __future__ import annotations

import asyncio
import math
import socket
import ssl
import zlib
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohappyeyeballs
import httptools

from gateway.providers.base import ErrorClass, ProviderError

KEEPALIVE_S = 60.0  # idle connections older than this are closed, not reused
DNS_TTL_S = 300.0
_READ_HIGH_WATER = 256 * 1024  # a stream's unread body above this pauses the socket
_URL_CACHE_SIZE = 1024

AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a URL's request goes, and the first two lines of its request head."""

    key: tuple[str, int, bool]
    host: str
    port: int
    tls: bool
    head: str  # "POST <path> HTTP/1.1\r\nHost: <host>\r\n"


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
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        host_header = f"{host_header}:{port}"
    return Origin((host, port, tls), host, port, tls, f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\n")


class ResponseHeaders(Mapping[str, str]):
    """Case-insensitive view of the raw header list, built on first access (error paths only)."""

    __slots__ = ("_map", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._map: dict[str, str] | None = None

    def _built(self) -> dict[str, str]:
        if self._map is None:
            built: dict[str, str] = {}
            for name, value in self._raw:
                key = name.decode("latin-1").lower()
                text = value.decode("latin-1")
                built[key] = f"{built[key]}, {text}" if key in built else text
            self._map = built
        return self._map

    def __getitem__(self, key: str) -> str:
        return self._built()[key.lower()]

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        return self._built().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._built()

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())


class Connection(asyncio.Protocol):
    """One keep-alive connection; serves one exchange at a time.

    The parser's callbacks fill the current response; the one task using the connection waits
    on a single future that every arrival of data (or failure) resolves.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, origin_key: tuple[str, int, bool],
                 read_timeout_s: float) -> None:
        self._loop = loop
        self.origin_key = origin_key
        self._read_timeout_s = read_timeout_s
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = math.inf
        self._paused = False
        self.closed = False
        self.idle_since = 0.0
        self._begin()

    def _begin(self) -> None:
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self._informational = False
        self._framed = False  # Content-Length or chunked: the body does not end at EOF
        self._keep_alive = False
        self._body: list[bytes] = []
        self._buffered = 0
        self._streaming = False
        self._decoder: zlib._Decompress | None = None
        self._error: ProviderError | None = None
        self._last_data = 0.0

    # --- the exchange, driven by the task that holds the connection ---

    def send(self, head: bytes, body: bytes, streaming: bool) -> None:
        self._begin()
        self._streaming = streaming
        self._last_data = self._loop.time()
        transport = self._transport
        try:
            if transport is None or transport.is_closing():
                raise ConnectionResetError("the connection is closed")
            if self._paused:  # the last stream was left unread after it completed
                self._paused = False
                transport.resume_reading()
            if len(body) <= 65536:
                transport.write(head + body)
            else:
                transport.writelines((head, body))
        except (OSError, RuntimeError) as exc:
            self.close()
            raise ProviderError(ErrorClass.CONNECTION, f"upstream connection failed while sending: {exc}") from None

    async def wait_headers(self, timeout_s: float) -> None:
        self._deadline = self._loop.time() + timeout_s if timeout_s < self._read_timeout_s else math.inf
        try:
            while not self.headers_done:
                await self._wait()
        finally:
            self._deadline = math.inf

    async def read_all(self) -> bytes:
        if self._streaming:  # the whole body is wanted now: no read pausing
            self._streaming = False
            if self._paused and self._transport is not None:
                self._paused = False
                self._transport.resume_reading()
        while not self.complete:
            await self._wait()
        body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._body = []
        return body

    async def read_some(self) -> bytes:
        """Body bytes that arrived since the last call; ``b""`` once the body is complete."""
        while not self._body:
            if self.complete:
                return b""
            await self._wait()
        chunks, self._body = self._body, []
        self._buffered = 0
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    @property
    def reusable(self) -> bool:
        return self.complete and self._keep_alive and not self.closed and self._error is None

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._timer = self._loop.call_at(min(self._last_data + self._read_timeout_s, self._deadline), self._timed_out)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _timed_out(self) -> None:
        due = min(self._last_data + self._read_timeout_s, self._deadline)
        if self._loop.time() < due:  # data arrived since the timer was set: wait the rest
            self._timer = self._loop.call_at(due, self._timed_out)
            return
        self._timer = None
        self._fail(ProviderError(ErrorClass.TIMEOUT, "upstream did not answer in time"))
        self.close()

    def _fail(self, error: ProviderError) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            if self._error is not None:
                waiter.set_exception(self._error)
            else:
                waiter.set_result(None)

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.complete:  # bytes nobody asked for on an idle connection: it cannot be trusted
            self.close()
            return
        self._last_data = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback raised: an unsupported or corrupt Content-Encoding
            if isinstance(cause, ProviderError):
                self._fail(cause)
            elif isinstance(cause, zlib.error):
                self._fail(ProviderError(ErrorClass.INVALID_RESPONSE,
                                         f"upstream sent a corrupt compressed body: {cause}"))
            else:
                self._fail(ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream sent invalid HTTP: {exc}"))
            self.close()
            return
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True  # not reusable from now on, even before connection_lost runs
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            if self.headers_done and not self._framed:
                self.complete = True  # a body delimited by the connection's close
            else:
                self._fail(ProviderError(ErrorClass.CONNECTION, "upstream closed the connection mid-response"
                                         if self.headers_done else "upstream closed the connection without answering"))
        self._wake()

    # --- httptools callbacks ---

    def on_message_begin(self) -> None:
        if self.complete:  # a second response to one request: answer this one, then drop the connection
            self._keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._informational = True  # 100 Continue / 103 Early Hints: the real answer follows
            self.raw_headers = []
            return
        self.status = status
        # Read now: llhttp resets its connection flags once the message is complete.
        self._keep_alive = self._parser.should_keep_alive()
        for name, value in self.raw_headers:
            lowered = name.lower()
            if lowered == b"content-length":
                self._framed = True
            elif lowered == b"transfer-encoding":
                self._framed = self._framed or b"chunked" in value.lower()
            elif lowered == b"content-encoding":
                self._decoder = _decoder_for(value)
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        if self._decoder is not None:
            body = self._decoder.decompress(body)
            if not body:
                return
        self._body.append(body)
        if self._streaming:
            self._buffered += len(body)
            if self._buffered > _READ_HIGH_WATER and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if self._informational:
            self._informational = False
            return
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self._body.append(tail)
        self.complete = True


def _decoder_for(value: bytes) -> zlib._Decompress | None:
    coding = value.strip().lower()
    if coding in (b"", b"identity"):
        return None
    if coding in (b"gzip", b"x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == b"deflate":
        return zlib.decompressobj()
    raise ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream used an unsupported Content-Encoding: {coding!r}")


class Http1Client:
    """The connections of one provider: keep-alive per origin, at most ``limit`` in use at once."""

    def __init__(self, *, limit: int, connect_timeout_s: float, read_timeout_s: float,
                 extra_head: str, tls: ssl.SSLContext | None) -> None:
        self._limit = limit
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._extra_head = extra_head  # constant header lines, e.g. User-Agent, Accept-Encoding
        self._tls = tls
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
            if len(self._origins) >= _URL_CACHE_SIZE:
                self._origins.clear()
            self._origins[url] = origin
        return origin

    def head(self, origin: Origin, headers: Mapping[str, str], body_length: int) -> bytes:
        text = "".join([origin.head, self._extra_head, *[f"{k}: {v}\r\n" for k, v in headers.items()],
                        f"Content-Length: {body_length}\r\n\r\n"])
        # Every line ends in exactly one CRLF: a CR or LF inside a name or value (header
        # injection from a configured header) shows up as an extra one.
        lines = len(headers) + self._extra_head.count("\n") + 4
        if text.count("\n") != lines or text.count("\r") != lines:
            raise ProviderError(ErrorClass.BAD_REQUEST, "an upstream request header contains a line break")
        return text.encode()

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> tuple[int, ResponseHeaders, bytes]:
        """One whole exchange: status, headers and the complete body."""
        conn = await self._send(url, headers, body, streaming=False, headers_timeout_s=math.inf)
        try:
            data = await conn.read_all()
        except BaseException:
            self.release(conn)
            raise
        self.release(conn)
        return conn.status, ResponseHeaders(conn.raw_headers), data

    async def open_stream(self, url: str, headers: Mapping[str, str], body: bytes,
                          headers_timeout_s: float) -> Connection:
        """Send a POST and wait for the response head; the caller reads the body and must
        ``release`` the connection (an unfinished body closes it)."""
        return await self._send(url, headers, body, streaming=True, headers_timeout_s=headers_timeout_s)

    async def _send(self, url: str, headers: Mapping[str, str], body: bytes, *, streaming: bool,
                    headers_timeout_s: float) -> Connection:
        origin = self.origin(url)
        head = self.head(origin, headers, len(body))
        conn = await self.acquire(origin)
        try:
            conn.send(head, body, streaming)
            await conn.wait_headers(headers_timeout_s)
        except BaseException:
            self.release(conn)
            raise
        return conn

    async def acquire(self, origin: Origin) -> Connection:
        if self._closed:
            raise ProviderError(ErrorClass.CONNECTION, "the upstream client is shut down")
        if self._in_use >= self._limit or self._queue:
            await self._wait_for_slot()  # the slot is handed over already counted
        else:
            self._in_use += 1
        try:
            idle = self._idle.get(origin.key)
            if idle:
                now = asyncio.get_running_loop().time()
                while idle:
                    conn = idle.pop()
                    if not conn.closed and now - conn.idle_since < KEEPALIVE_S:
                        return conn
                    self._drop(conn)
            return await self._connect(origin)
        except BaseException:
            self._free_slot()
            raise

    def release(self, conn: Connection) -> None:
        """Back to the idle list when the exchange finished cleanly; otherwise closed (a
        response abandoned mid-body cannot be reused, and closing stops the upstream's work)."""
        if conn.reusable and not self._closed:
            now = conn.idle_since = asyncio.get_running_loop().time()
            idle = self._idle.setdefault(conn.origin_key, [])
            idle.append(conn)
            # Reuse is LIFO, so connections at the bottom may sit unused after a burst: drop
            # those the server closed or that idled past the keep-alive, oldest first.
            while idle[0].closed or now - idle[0].idle_since >= KEEPALIVE_S:
                self._drop(idle.pop(0))
        else:
            self._drop(conn)
        self._free_slot()

    def _drop(self, conn: Connection) -> None:
        conn.close()
        self._open.discard(conn)

    async def _connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        conn = Connection(loop, origin.key, self._read_timeout_s)
        tls = None
        if origin.tls:
            tls = self._tls if self._tls is not None else _default_tls()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                addresses = await self._resolve(origin, loop)
                # Happy eyeballs (RFC 8305): a host whose IPv6 route is broken still connects
                # over IPv4 quickly, instead of hanging on the first address until the timeout.
                sock = await aiohappyeyeballs.start_connection(addresses, happy_eyeballs_delay=0.25, interleave=1)
                try:
                    await loop.create_connection(lambda: conn, sock=sock, ssl=tls,
                                                 server_hostname=origin.host if tls else None)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError:
            conn.close()
            self._dns.pop((origin.host, origin.port), None)
            raise ProviderError(ErrorClass.TIMEOUT, "upstream did not accept the connection in time") from None
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS (SSLError)
            conn.close()
            self._dns.pop((origin.host, origin.port), None)
            raise ProviderError(ErrorClass.CONNECTION, f"cannot connect to upstream: {exc}") from None
        self._open.add(conn)
        return conn

    async def _resolve(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> list[AddrInfo]:
        """Addresses cached for ``DNS_TTL_S`` (dropped at once when a connect fails): new
        connections are rare with keep-alive, but a burst after idle would otherwise queue on
        the resolver's thread pool."""
        key = (origin.host, origin.port)
        cached = self._dns.get(key)
        now = loop.time()
        if cached is not None and cached[0] > now:
            return cached[1]
        infos = await loop.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"no address for {origin.host}")
        self._dns[key] = (now + DNS_TTL_S, infos)
        return infos

    async def _wait_for_slot(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._queue.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._free_slot()  # handed over just as we were cancelled: pass it on
            else:
                self._queue.remove(waiter)
            raise

    def _free_slot(self) -> None:
        while self._queue:
            waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands; the count stays
                return
        self._in_use -= 1

    def close(self) -> None:
        self._closed = True
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()


_tls_context: ssl.SSLContext | None = None


def _default_tls() -> ssl.SSLContext:
    """The system trust store, loaded once (it reads certificate files: start-up, not per call)."""
    global _tls_context
    if _tls_context is None:
        _tls_context = default_tls_context()
    return _tls_context


def default_tls_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context
