"""The HTTP/1.1 connection protocol: uvicorn's httptools protocol with a bounded head and read timeouts.

Why it exists: uvicorn's httptools protocol buffers a request head without limit (llhttp has
none: 96 MiB of headers were held before the API key was even looked at) and has no read
timeouts, so a connection that sends a head one byte at a time, stops halfway through a body, or
never sends anything stays open forever (slowloris). This subclass adds, per connection:

* ``server.max_header_bytes``: the request line and headers must fit; past it the caller gets
  ``431`` and the connection is closed before any application work, having buffered at most
  that many head bytes (a read that crosses the limit is fed only up to it; a head pipelined
  behind a body in the same read is counted from the next read, so one read, at most 256 KiB
  with uvloop, can come on top).
* ``server.header_timeout_s``: a whole head must arrive within this time, counted from the
  connection's start for its first request and from the first byte of each later one. A
  connection that sent nothing is closed silently; one that sent part of a head gets ``408``.
* ``server.body_timeout_s``: the longest silence between two reads of a request body (the
  meaning of nginx's ``client_body_timeout``), so a slow but moving upload is not cut off and a
  stalled one gets ``408``. A body dribbled a byte just inside that timeout would still hold the
  connection for hours, so the whole body also has a deadline that grows with what arrived
  (Apache's ``mod_reqtimeout`` rule): ``body_timeout_s`` plus one second per ``MIN_BODY_RATE``
  bytes received, i.e. after the first ``body_timeout_s`` it must average 500 bytes/s, far
  below any real link. Time spent with reading paused by the server (back-pressure, a pipelined
  request waiting for its turn) does not count against the caller.
* Idle keep-alive connections are closed by uvicorn's own ``timeout_keep_alive``
  (``server.keepalive_timeout_s``).
* A request answered before its body has all arrived (refused for its key, its declared size)
  is answered with ``Connection: close`` and the connection closed after the answer: the rest
  of its body is never read, so a caller refused at once cannot keep the connection by dribbling
  a body nobody will use. A request's ``keep_alive`` is held off from its head until its body has
  all arrived (``on_headers_complete``, ``on_message_complete``): two attribute writes, where a
  cycle subclass swapped in per request cost ~10k instructions a request (its instance dict).

Errors the server itself answers (these, and requests llhttp cannot parse, such as a duplicate
``Content-Length``) use the OpenAI error shape like every other error.

Cost on the hot path: a few attribute operations per read (one ``loop.time()`` per body read) and
two hooks per request; timers are armed only when a read leaves a head or body incomplete, so a
request that arrives whole arms none (a connection's first head uses the timer armed at the
connect), so the bounds add little over uvicorn's own protocol (bench/README.md).

The class is handed to uvicorn as ``functools.partial(BoundedHttpToolsProtocol, limits=...)``:
uvicorn calls it with its own keyword arguments, and with ``--workers`` the partial pickles by
reference into the worker processes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.config import Config as UvicornConfig
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gateway.http.request_id import REQUEST_ID_HEADER, request_id, scope_request_id

# Connection phases. HEAD: reading a head (``_head_bytes`` > 0 once a byte of it arrived);
# BODY: the head is complete and the body is not. Plain ints, tested for truth on the hot path.
_HEAD, _BODY = 0, 1

#: bytes/s a request body must average once its first ``body_timeout_s`` are over
MIN_BODY_RATE = 500

#: the JSON body of an answer the server gives itself: ``(status, message, code) -> bytes``. The
#: application supplies it, so these answers have the API's error shape without this layer knowing it.
ErrorBody = Callable[[int, str, str], bytes]


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one connection may take before the server answers for the application (module docstring)."""

    #: request line + headers; past it 431
    max_header_bytes: int = 64 * 1024
    #: a whole request head must arrive within this
    header_timeout_s: float = 10.0
    #: the longest silence between two reads of a request body
    body_timeout_s: float = 30.0


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(self, config: UvicornConfig, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, limits: ServerLimits,
                 error_body: ErrorBody) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._error_body = error_body
        self._max_head = limits.max_header_bytes
        self._header_timeout = limits.header_timeout_s
        self._body_timeout = limits.body_timeout_s
        self._phase = _HEAD
        self._head_bytes = 0  # bytes read since the current head began (approximately: whole reads)
        self._body_seen = 0.0  # loop time of the last read during a body
        self._body_since = 0.0  # loop time the body's clock started
        self._body_bytes = 0  # bytes read since then
        self._timer: asyncio.TimerHandle | None = None
        #: ``_should_upgrade``'s answer, and the header list (one per request) it is the answer for
        self._upgrade = False
        self._upgrade_of: list[tuple[bytes, bytes]] | None = None
        #: the request whose ``keep_alive`` is held off until its body has all arrived (``on_headers_complete``)
        self._keep_after_body: RequestResponseCycle | None = None

    # Connection lifecycle

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # The first head is due this long after the connect: also closes connections that send nothing.
        self._timer = self.loop.call_later(self._header_timeout, self._expired)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase:  # a body
            self._body_seen = self.loop.time()
            self._body_bytes += len(data)
        elif len(data) > self._max_head - self._head_bytes:
            self._feed_up_to_limit(data)
            return
        else:
            self._head_bytes += len(data)
        # uvicorn's data_received (inlined: this is the hot path), keeping the parser's reason in the 400.
        if self.timeout_keep_alive_task is not None:
            self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.logger.warning("Invalid HTTP request received: %s", str(exc)[:200])
            self.send_400_response(f"invalid HTTP request: {str(exc)[:200]}")
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self._cancel_timer()  # the connection now belongs to the WebSocket protocol
                self._phase = _HEAD
                self._head_bytes = 0
                self.handle_websocket_upgrade()
                return
            # Not a WebSocket handshake, or the WebSocket mode is off (websocket.enabled: uvicorn's ws is
            # "none"): the request was served as plain HTTP. uvicorn's own warning here would tell operators
            # to install a WebSocket library.
        if self._timer is None and (self._phase or self._head_bytes) and not self.transport.is_closing():
            self._arm()

    def _should_upgrade(self) -> bool:
        """uvicorn's answer, once per request: it asks up to three times (head, message end, the parser's
        upgrade), each a scan of every header."""
        headers = self.headers
        if self._upgrade_of is not headers:
            self._upgrade_of = headers
            self._upgrade = HttpToolsProtocol._should_upgrade(self)
        return self._upgrade

    def handle_websocket_upgrade(self) -> None:
        """Hand the connection to the WebSocket protocol with the head as parsed here (``upgraded``:
        http/websocket_handshake.py), not written back out for the library to parse again; a protocol
        without ``upgraded``, or a handshake it leaves to the library, gets the raw head as uvicorn gives it."""
        if getattr(self.ws_protocol_class, "upgraded", None) is None:
            super().handle_websocket_upgrade()
            return
        self.connections.discard(self)
        protocol: Any = self.ws_protocol_class(config=self.config, server_state=self.server_state,  # type: ignore[call-arg, misc]
                                               app_state=self.app_state)
        protocol.taken_over(self.transport, self.server, self.client, self.scheme)
        self.transport.set_protocol(protocol)
        if not protocol.upgraded(self.scope, self.url):
            head = [self.scope["method"].encode(), b" ", self.url, b" HTTP/1.1\r\n"]
            for name, value in self.scope["headers"]:
                head += (name, b": ", value, b"\r\n")
            head.append(b"\r\n")
            protocol.data_received(b"".join(head))

    def _feed_up_to_limit(self, data: bytes) -> None:
        """Feed only what still fits a head; if the head then completed, feed the rest as usual."""
        view = memoryview(data)
        room = self._max_head - self._head_bytes
        self.data_received(view[:room])  # type: ignore[arg-type]
        if self.transport.is_closing():
            return
        # on_headers_complete resets the count: the head ended within the limit.
        if self._head_bytes == self._max_head and not self._phase:
            self._reject(431, f"the request head (request line and headers) is larger than the limit of "
                              f"{self._max_head} bytes", "request_header_fields_too_large")
            return
        self.data_received(view[room:])  # type: ignore[arg-type]

    # Parser callbacks: phase changes

    def on_headers_complete(self) -> None:
        self._phase = _BODY
        self._head_bytes = 0
        if self._timer is not None:
            self._cancel_timer()
        previous = self.cycle
        HttpToolsProtocol.on_headers_complete(self)
        cycle = self.cycle
        if cycle is not previous and cycle.keep_alive:  # a new request (not an upgrade) that may keep the connection
            # Until its body has all arrived, an answer says ``Connection: close`` and closes (see the module doc).
            cycle.keep_alive = False
            self._keep_after_body = cycle

    def on_message_complete(self) -> None:
        self._phase = _HEAD
        if self._timer is not None:
            self._cancel_timer()
        cycle = self._keep_after_body
        if cycle is not None:
            self._keep_after_body = None
            if not cycle.response_started:  # answered after its whole body: the connection may be kept
                cycle.keep_alive = True
        HttpToolsProtocol.on_message_complete(self)

    def shutdown(self) -> None:
        self._keep_after_body = None  # uvicorn's shutdown ends keep-alive: a body arriving later must not restore it
        HttpToolsProtocol.shutdown(self)

    # Timers

    def _arm(self) -> None:
        if self._phase == _BODY:
            self._body_seen = self._body_since = self.loop.time()
            self._body_bytes = 0
            self._timer = self.loop.call_later(self._body_timeout, self._expired)
        else:
            self._timer = self.loop.call_later(self._header_timeout, self._expired)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            # Not the caller's delay: the server is not reading (back-pressure or a pipelined request).
            self._arm()
            return
        if self._phase == _BODY:
            now = self.loop.time()
            silence_left = self._body_seen + self._body_timeout - now
            rate_left = self._body_since + self._body_timeout + self._body_bytes / MIN_BODY_RATE - now
            if silence_left > 0 and rate_left > 0:
                self._timer = self.loop.call_later(min(silence_left, rate_left), self._expired)
                return
            reason = (f"nothing was received for {self._body_timeout:g} s" if silence_left <= 0 else
                      f"it arrived slower than {MIN_BODY_RATE} bytes/s")
            self._reject(408, f"the request body stalled: {reason} (server.body_timeout_s)", "request_timeout")
        elif self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head while the previous request still runs: its clock starts when that ends.
            self._arm()
        elif self._head_bytes:
            self._reject(408, f"the request head did not arrive within {self._header_timeout:g} s "
                              f"(server.header_timeout_s)", "request_timeout")
        else:
            self.transport.close()  # connected but never sent a byte: nothing to answer

    # Responses the server writes itself

    def _reject(self, status: int, message: str, code: str) -> None:
        """Answer with an OpenAI-shaped error and close, unless this would not be the one answer to a request.

        Within a body, that is when the application has already answered (say an early 413); within
        a head, when the previous request's answer is still being written (a pipelined head).
        """
        cycle = self.cycle
        if cycle is None:
            answer = True
        elif self._phase == _BODY:
            answer = not cycle.response_started
        else:
            answer = cycle.response_complete
        if answer:
            # A stalled body's head was whole: its request's id (the caller's, when safe) is the one the
            # application logs. A head refused or never finished may not even have been read: a new id.
            rid = scope_request_id(cycle.scope["headers"]) if cycle is not None and self._phase == _BODY \
                else request_id(None)
            self.transport.write(_error_bytes(self.server_state.default_headers, status,
                                              self._error_body(status, message, code), rid))
        if cycle is not None:
            cycle.keep_alive = False
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self._reject(400, msg, "invalid_http_request")


def _error_bytes(default_headers: list[tuple[bytes, bytes]], status: int, body: bytes, rid: bytes) -> bytes:
    head = [STATUS_LINE[status]]
    for name, value in default_headers:
        head.extend([name, b": ", value, b"\r\n"])
    head.extend([REQUEST_ID_HEADER, b": ", rid, b"\r\n"])  # every answer carries a request id
    head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
    return b"".join(head) + body


# The server's default header lines (``date``, replaced by uvicorn once a second), encoded once per list.
_defaults: tuple[list[tuple[bytes, bytes]] | None, bytes] = (None, b"")


def whole_response_cycle(send: Any) -> RequestResponseCycle | None:
    """The request's uvicorn cycle when ``send`` is its own and a whole response may be written at once.

    That is our server (not a test client or a wrapping middleware), nothing sent yet, the
    transport not applying back-pressure, no uvicorn access log and not a ``HEAD`` request; else
    None, and the response goes through ``send`` as usual.
    """
    cycle = getattr(send, "__self__", None)
    if (type(cycle) is not RequestResponseCycle or cycle.response_started or cycle.flow.write_paused
            or cycle.access_log or cycle.scope["method"] == "HEAD"):
        return None
    return cycle


def write_whole_response(cycle: RequestResponseCycle, status: int, head: bytes, body: bytes) -> None:
    """A whole response in one write, with the state changes uvicorn's ``send`` makes for its two messages.

    Why: a JSON answer is complete before its first byte, and uvicorn's ``send`` costs a
    coroutine, a write system call and a check of every header with two regular expressions
    per message. ``head`` holds header lines (``name: value\r\n``) that the gateway encoded
    itself, from constants, numbers and checked ids (never caller or upstream text), and
    must include ``content-length``. ``cycle`` comes from :func:`whole_response_cycle`.
    """
    global _defaults
    cycle.response_started = True
    cycle.waiting_for_100_continue = False
    if cycle.disconnected:
        return  # as uvicorn's ``send``: nothing to write to
    defaults = cycle.default_headers
    if _defaults[0] is not defaults:
        _defaults = (defaults, b"".join([b"%s: %s\r\n" % (name, value) for name, value in defaults]))
    close = b"" if cycle.keep_alive else b"connection: close\r\n"
    cycle.transport.write(b"".join((STATUS_LINE[status], _defaults[1], head, close, b"\r\n", body)))
    cycle.chunked_encoding = False
    cycle.expected_content_length = 0
    cycle.response_complete = True
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()


def protocol_factory(limits: ServerLimits, error_body: ErrorBody) -> functools.partial[BoundedHttpToolsProtocol]:
    """What to pass as uvicorn's ``http=`` setting (``error_body`` must be a module-level function: it pickles)."""
    return functools.partial(BoundedHttpToolsProtocol, limits=limits, error_body=error_body)
