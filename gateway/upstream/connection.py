"""One upstream HTTP/1.1 connection: an asyncio protocol around an llhttp response parser.

The client (``http1.py``) owns pooling and connecting; this module owns one exchange at a time
on one socket: writing the request, parsing the response as it arrives, timeouts (per read,
for a send that stalls, and the exchange's deadline), the response's size bounds, read pausing
for slow stream consumers, and deciding whether the connection can be reused.
"""

from __future__ import annotations

import asyncio
import math
import time

import httptools

from gateway.config.transport import PoolLimits, Timeouts
from gateway.upstream.decoding import BodyDecoder, decoder_for
from gateway.upstream.errors import ErrorClass, ProviderError, ResponseTooLarge
from gateway.upstream.headers import ResponseHeaders

__all__ = ["MAX_HEAD_BYTES", "Connection", "ResponseHeaders"]

_READ_HIGH_WATER = 256 * 1024  # a stream's unread body above this pauses the socket
MAX_HEAD_BYTES = 64 * 1024  # a response head (status line and headers, 1xx heads included) past this fails


class Connection(asyncio.Protocol):
    """One keep-alive connection; serves one exchange at a time.

    The parser's callbacks fill the current response; the one task using the connection waits
    on a single future that every arrival of data (or failure) resolves. Slotted: the hot path
    reads these attributes on every callback, and a plain instance dict of this many keys
    loses CPython's attribute specialisation.
    """

    __slots__ = (
        "_base_read_s", "_body", "_body_left", "_buffered", "_cap_message", "_deadline", "_decoded_left", "_decoder",
        "_early", "_eof", "_error", "_exchange_deadline",
        "_framed", "_head_bytes", "_informational", "_keep_alive", "_last_data", "_max_bytes", "_parser",
        "_paused", "_read_timeout_s", "_received", "_streaming", "_timer", "_transport", "_unsent", "_waiter",
        "_write_progress", "_write_timeout_s", "closed", "complete", "headers_done", "idle_since", "loop", "origin_key",
        "raw_headers", "status"
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, origin_key: tuple[str, int, bool], timeouts: Timeouts,
                 limits: PoolLimits) -> None:
        self.loop = loop
        self.origin_key = origin_key
        # Unpacked once per connection: they are read on every wait and every piece of body.
        self._read_timeout_s = self._base_read_s = timeouts.read
        self._write_timeout_s = timeouts.write
        self._max_bytes = limits.max_response_bytes
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = self._exchange_deadline = math.inf
        self._cap_message = ""
        self._paused = False
        self._eof = False  # the peer's clean FIN: the only end of a body delimited by the close
        self.closed = False
        self.idle_since = 0.0
        # Per exchange, but set only where they start to matter (fewer stores per request).
        self._early = False  # answered while the request was still being sent: the connection's end
        self._write_progress = 0.0  # when unsent request bytes last moved: set while some are left
        self._decoded_left = 0  # budget of a compressed body's decoded bytes: set with its decoder
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
        self._decoder: BodyDecoder | None = None
        self._error: ProviderError | None = None
        self._last_data = 0.0
        self._received = False  # any byte of the response: failures say ``responded``
        self._head_bytes = 0  # received before the head was complete
        self._body_left = self._max_bytes
        self._unsent = 0  # request bytes still in our write buffer, as last seen

    # --- the exchange, driven by the task that holds the connection ---

    def send(self, head: bytes, body: bytes, streaming: bool, deadline: float) -> None:
        """Start an exchange that must end by ``deadline`` (a ``time.monotonic()`` instant): every
        wait on this connection until the next ``send`` fails at it, whatever the read timeout allows."""
        self._begin()
        now = self._last_data = self.loop.time()
        self._deadline = self._exchange_deadline = deadline + (now - time.monotonic())  # loop's clock; inf stays
        self._read_timeout_s = self._base_read_s  # a stream may have changed it (``content_by``, ``idle_after``)
        self._streaming = streaming
        transport = self._transport
        try:
            if transport is None or transport.is_closing():
                raise ConnectionResetError("the connection is closed")
            self._resume_reading()  # the last stream may have been left unread after it completed
            if len(body) <= 65536:
                transport.write(head + body)
            else:
                transport.writelines((head, body))
            # What the kernel did not take at once leaves as the peer reads: watched for stalls
            # and for an answer that comes before it all left.
            self._unsent = unsent = transport.get_write_buffer_size()
            if unsent:
                self._write_progress = now
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

    def content_by(self, deadline: float, message: str) -> None:
        """Fail the waits of this exchange at ``deadline`` (``time.monotonic()``) with ``message``: the
        first-token deadline of a stream, lifted by ``idle_after`` once content flows."""
        self._deadline = min(self._exchange_deadline, deadline + (self.loop.time() - time.monotonic()))
        self._cap_message = message

    def idle_after(self, seconds: float | None) -> None:
        """Content flows: lift ``content_by`` and, when given, let silences of only ``seconds`` fail the exchange."""
        self._deadline = self._exchange_deadline
        if seconds is not None:
            self._read_timeout_s = seconds
            self._cap_message = f"upstream stream stalled (no bytes for {seconds:g} s)"

    @property
    def reusable(self) -> bool:
        return self.complete and self._keep_alive and not self.closed and self._error is None

    def _resume_reading(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        transport = self._transport
        if transport is not None:
            # A request the peer stopped reading would hold ``close()`` open until it flushed.
            if transport.get_write_buffer_size():
                transport.abort()
            else:
                transport.close()

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        waiter = self.loop.create_future()
        self._waiter = waiter
        self._timer = self.loop.call_at(self._due(), self._timed_out)
        try:
            await waiter
        finally:
            self._waiter = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _due(self) -> float:
        """When the wait fails: a read timeout after the last bytes that moved, a send that made
        no progress for the write timeout, or the exchange's deadline."""
        due = self._last_data + self._read_timeout_s
        if self._unsent and not self._received:
            due = min(due, self._write_progress + self._write_timeout_s)
        return min(due, self._deadline)

    def _timed_out(self) -> None:
        now = self.loop.time()
        sending = self._unsent and not self._received
        if sending and self._transport is not None:
            left = self._transport.get_write_buffer_size()
            if left < self._unsent:  # the peer read some of the request since the last look
                self._unsent = left
                self._write_progress = self._last_data = now
        due = self._due()
        if now < due:  # data moved since the timer was set: wait the rest
            self._timer = self.loop.call_at(due, self._timed_out)
            return
        self._timer = None
        if now >= self._deadline:
            self._fail_with(ErrorClass.TIMEOUT, self._cap_message if self._deadline < self._exchange_deadline
                            else "the request deadline passed while waiting for upstream")
        elif self._unsent and not self._received:
            self._fail_with(ErrorClass.TIMEOUT, "upstream stopped reading the request")
        else:
            self._fail_with(ErrorClass.TIMEOUT, self._cap_message if self._read_timeout_s != self._base_read_s
                            else "upstream did not answer in time")
        self.close()

    def _fail_with(self, error_class: ErrorClass, message: str) -> None:
        self._fail(ProviderError(error_class, message))

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
        self._last_data = self.loop.time()
        if not self.headers_done:
            self._head_bytes += len(data)  # (with any body bytes in the same read: an upper bound)
        if not self._received:
            self._received = True
            # An answer before the whole request left (an early 413): the peer has not read it
            # all, so what follows on this socket is out of step. Never reused (so never reset).
            if self._unsent and self._transport is not None and self._transport.get_write_buffer_size():
                self._early = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            cause = exc.__context__  # what a callback raised: a limit, an unsupported or corrupt encoding
            if isinstance(cause, ProviderError):
                self._fail(cause)
            else:
                self._fail_with(ErrorClass.INVALID_RESPONSE, f"upstream sent invalid HTTP: {exc}")
            self.close()
            return
        if not self.headers_done and self._head_bytes > MAX_HEAD_BYTES:
            # A head that never ends is cut off before the parser holds much of it.
            self._fail(_head_too_large())
            self.close()
            return
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True  # not reusable from now on, even before connection_lost runs
        self._eof = True
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self._error is None:
            if self.headers_done and not self._framed and self._eof and exc is None:
                try:  # a body delimited by the connection's close, ended by a clean FIN
                    self._finish_body()
                except ProviderError as error:
                    self._fail(error)
            elif exc is not None and self.headers_done:
                self._fail_with(ErrorClass.CONNECTION, f"upstream connection failed mid-response: {exc}")
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
        # Read now: llhttp resets its connection flags once the message is complete. A 413 is
        # often sent without reading the request body, which would then follow on this socket.
        self._keep_alive = self._parser.should_keep_alive() and not self._early and status != 413
        for name, value in self.raw_headers:
            lowered = name.lower()
            if lowered == b"content-length":
                self._framed = True
            elif lowered == b"transfer-encoding":
                self._framed = self._framed or b"chunked" in value.lower()
            elif lowered == b"content-encoding":
                self._decoder = decoder_for(value)
                self._decoded_left = self._max_bytes
        # Exact only when the reads so far could hold more than the limit (one large read can
        # carry a whole oversized head past the running count).
        if self._head_bytes > MAX_HEAD_BYTES and sum(len(n) + len(v) + 4 for n, v in self.raw_headers) > MAX_HEAD_BYTES:
            raise _head_too_large()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        self._body_left -= len(body)
        if self._body_left < 0:
            raise _body_too_large(self._max_bytes)
        if self._decoder is not None:
            body = self._decoder.decode(body, self._decoded_left)
            if not body:
                return
            self._decoded_left -= len(body)
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
        if self._decoder is None:
            self.complete = True
        else:
            self._finish_body()

    def _finish_body(self) -> None:
        if self._decoder is not None:
            tail = self._decoder.finish(self._decoded_left)  # a compressed stream cut short fails here
            if tail:
                self._body.append(tail)
        self.complete = True


def _head_too_large() -> ProviderError:
    return ProviderError(ErrorClass.INVALID_RESPONSE, f"upstream response head is larger than {MAX_HEAD_BYTES} bytes")


def _body_too_large(limit: int) -> ProviderError:
    return ResponseTooLarge(f"upstream response is larger than max_response_bytes ({limit})")
