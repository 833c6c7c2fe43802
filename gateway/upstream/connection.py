"""One upstream HTTP/1.1 connection: an asyncio protocol around an llhttp response parser.

The client (``http1.py``) owns pooling and connecting; this module owns one exchange at a time
on one socket: writing the request, parsing the response as it arrives, timeouts per read
and the exchange's deadline, read pausing for slow stream consumers, and deciding whether the
connection can be reused.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import Iterator, Mapping

import httptools

from gateway.upstream.errors import ErrorClass, ProviderError

_READ_HIGH_WATER = 256 * 1024  # a stream's unread body above this pauses the socket


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
        self._received = False  # any byte of the response: failures say ``responded``

    # --- the exchange, driven by the task that holds the connection ---

    def send(self, head: bytes, body: bytes, streaming: bool, deadline: float) -> None:
        """Start an exchange that must end by ``deadline`` (loop time): every wait on this
        connection until the next ``send`` fails at it, whatever the read timeout allows."""
        self._begin()
        self._deadline = deadline
        self._streaming = streaming
        self._last_data = self._loop.time()
        transport = self._transport
        try:
            if transport is None or transport.is_closing():
                raise ConnectionResetError("the connection is closed")
            self._resume_reading()  # the last stream may have been left unread after it completed
            if len(body) <= 65536:
                transport.write(head + body)
            else:
                transport.writelines((head, body))
        except (OSError, RuntimeError) as exc:
            self.close()
            raise ProviderError(ErrorClass.CONNECTION, f"upstream connection failed while sending: {exc}") from None

    async def wait_headers(self) -> None:
        while not self.headers_done:
            await self._wait()

    async def read_all(self) -> bytes:
        if self._streaming:  # the whole body is wanted now: no read pausing
            self._streaming = False
            self._resume_reading()
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
        self._resume_reading()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    @property
    def reusable(self) -> bool:
        return self.complete and self._keep_alive and not self.closed and self._error is None

    def _resume_reading(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        waiter = self._loop.create_future()
        self._waiter = waiter
        self._timer = self._loop.call_at(self._due(), self._timed_out)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _due(self) -> float:
        """When the wait fails: a read timeout after the last data, or the exchange's deadline."""
        return min(self._last_data + self._read_timeout_s, self._deadline)

    def _timed_out(self) -> None:
        now = self._loop.time()
        due = self._due()
        if now < due:  # data arrived since the timer was set: wait the rest
            self._timer = self._loop.call_at(due, self._timed_out)
            return
        self._timer = None
        if now >= self._deadline:
            self._fail_with(ErrorClass.TIMEOUT, "the request deadline passed while waiting for upstream")
        else:
            self._fail_with(ErrorClass.TIMEOUT, "upstream did not answer in time")
        self.close()

    def _fail_with(self, error_class: ErrorClass, message: str) -> None:
        self._fail(ProviderError(error_class, message, responded=self._received))

    def _fail(self, error: ProviderError) -> None:
        if self._error is None:
            error.responded = self._received
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
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback raised: an unsupported or corrupt Content-Encoding
            if isinstance(cause, ProviderError):
                self._fail(cause)
            elif isinstance(cause, zlib.error):
                self._fail_with(ErrorClass.INVALID_RESPONSE, f"upstream sent a corrupt compressed body: {cause}")
            else:
                self._fail_with(ErrorClass.INVALID_RESPONSE, f"upstream sent invalid HTTP: {exc}")
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
                self._fail_with(ErrorClass.CONNECTION, "upstream closed the connection mid-response"
                                if self.headers_done else "upstream closed the connection without answering")
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
