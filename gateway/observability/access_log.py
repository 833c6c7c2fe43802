"""Access records (``logging.access``): one line per request, written straight to the log handler's stream.

The record's fields are chosen by the request's exchange (``gateway/api/request/exchange.py``); this module
only writes them. Which writer is in use (or none: access records off) is decided once per process
at start-up (``startup.configure_logging`` calls :func:`install`). A module that writes records on
its hot path keeps its own reference through :func:`subscribe` instead of looking it up here for
every request; this module imports nothing from the layers that write records.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway import redact
from gateway.observability import logs
from gateway.observability.logs import MILLIS as _MILLIS
from gateway.observability.logs import MILLIS_BYTES as _MILLIS_BYTES
from gateway.observability.logs import escape

# Bound by assignment, not by ``from ... import``: CPython calls a method of an imported name
# through a bound method object, of an assigned one without (LOAD_METHOD), as it did before the move.
_CLOCK = logs.CLOCK


class AccessLog:
    """Access records (``logging.access``), written straight to the log handler's stream.

    A request's record would otherwise cost a ``LogRecord``, a walk up the logger tree and a
    formatter pass, several times what building the line costs. The line is the one the
    configured format would write: a JSON object with ``logger: loopgate.access`` or a text line
    ``... INFO loopgate.access: access request_id=... status=...``. The fields are ids, names the
    gateway chose and numbers; the line still goes through ``redact.scrub`` in text form. A JSON
    line is the record's fields serialised once, behind a prefix that is constant but for ``ts``
    (no second dict per record).

    On a line-buffered or write-through stream with a file descriptor and UTF-8 (stderr, as
    ``loopgate serve`` logs: line-buffered on a terminal, write-through on a pipe or a file) a
    JSON line is bytes from orjson, written with the system's ``write``: nothing is pending in the
    text layer between two whole lines. Lines wait at most ``FLUSH_S`` (or until
    ``FLUSH_LINES`` wait) and go out together in one ``write``: a system call per line cost as
    much as the rest of the record on a busy worker (bench/README.md). The first line of a batch
    checks the stream (``setStream`` may have replaced it) and starts the batch's timer; the
    others only join it. A line written outside a running loop goes out at once, and what waits
    at exit is written then. One call per batch of
    whole lines keeps them whole beside other writers; a log line written meanwhile by other code
    may come before them. Elsewhere (a file opened with a buffer, a test's ``StringIO``) a line
    goes through the stream's ``write``.
    """

    #: the longest an access line waits to be written with the next ones
    FLUSH_S = 0.02
    #: written at once when this many lines wait (a bound on what a crash can lose, with ``FLUSH_S``;
    #: a line is a few hundred bytes: its fields are ids, names from the config and numbers)
    FLUSH_LINES = 100

    def __init__(self, handler: logging.StreamHandler, kind: str) -> None:
        self._handler = handler
        self._json = kind == "json"
        self._pid = os.getpid()
        # what follows the milliseconds of ``ts`` on every JSON line
        self._head = f'Z","level":"info","logger":"loopgate.access","pid":{self._pid},"message":"access"'
        self._head_bytes = self._head.encode() + b","
        self._second = -1
        self._prefix = ""  # '{"ts":"' and the current second, to the decimal point
        self._prefix_bytes = b""
        # A line-buffered stream (stderr) flushes at the line's end by itself; others are flushed per line.
        self._stream: Any = None
        self._flush = True
        self._fd = -1  # the stream's descriptor when whole JSON lines may be written to it directly
        self._pending: list[bytes] = []  # lines waiting for ``flush``
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that runs ``flush``
        self._timer: asyncio.TimerHandle | None = None

    def write(self, fields: dict[str, Any]) -> None:
        pending = self._pending
        joining = bool(pending) and self._loop.is_running()  # type: ignore[union-attr]
        if not joining:
            if pending:
                self.flush()  # the loop of the batch's timer stopped: it would never fire
            if not self._opens_batch(fields):
                return
        # A JSON line for the descriptor: it opens a batch or joins the open one.
        now = time.time()
        second = int(now)
        if second != self._second:
            self._new_second(second)
        pending.append(b"".join((self._prefix_bytes, _MILLIS_BYTES[int((now - second) * 1000)],
                                 self._head_bytes, orjson.dumps(fields, default=str)[1:], b"\n")))
        if not joining:
            if not self._defer():  # the batch's timer (none outside a running loop: written at once)
                self.flush()
        elif len(pending) >= self.FLUSH_LINES:
            self.flush()

    def _opens_batch(self, fields: dict[str, Any]) -> bool:
        """True when this line is JSON for the descriptor (``write`` batches it); else it is written here."""
        handler = self._handler
        stream = handler.stream
        if stream is not self._stream:  # the handler's stream can be replaced (``setStream``)
            self._use(stream)
        if self._json and self._fd >= 0 and fields:
            return True
        now = time.time()
        if self._json:
            second = int(now)
            if second != self._second:
                self._new_second(second)
            body = orjson.dumps(fields, default=str).decode()
            text = "".join((self._prefix, _MILLIS[int((now - second) * 1000)], self._head, "," if fields else "",
                            body[1:], "\n"))
        else:
            pairs = " ".join(f"{name}={_text(value)}" for name, value in fields.items() if value is not None)
            text = f"{_CLOCK.text(now)} INFO loopgate.access: " + redact.scrub(escape("access " + pairs)) + "\n"
        with handler.lock:  # type: ignore[union-attr]
            stream.write(text)
            if self._flush:
                stream.flush()
        return False

    def _new_second(self, second: int) -> None:
        self._second = second
        self._prefix = time.strftime('{"ts":"%Y-%m-%dT%H:%M:%S.', time.gmtime(second))
        self._prefix_bytes = self._prefix.encode()

    def _defer(self) -> bool:
        """Have ``flush`` run within ``FLUSH_S``; False outside a running loop."""
        loop = self._loop
        if loop is None or not loop.is_running():  # asyncio's own look-up makes a system call (getpid) on 3.11
            try:
                loop = self._loop = asyncio.get_running_loop()
            except RuntimeError:
                return False
        self._timer = loop.call_later(self.FLUSH_S, self.flush)
        return True

    def flush(self) -> None:
        """Write the pending lines, in one system call where the descriptor takes them whole."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = self._pending
        if not pending:
            return
        data = b"".join(pending) if len(pending) > 1 else pending[0]
        pending.clear()
        try:
            stream = self._stream
            if not stream.line_buffering:  # write-through over a buffered layer: what it holds goes first
                with self._handler.lock:  # type: ignore[union-attr]
                    stream.flush()
            while data:  # a short write only for a full disk or pipe
                data = data[os.write(self._fd, data):]
        except (OSError, ValueError):  # ValueError: the stream was closed
            self._fd = -1  # the descriptor went away: the stream's own write from now on
            with contextlib.suppress(Exception), self._handler.lock:  # type: ignore[union-attr]
                self._stream.write(data.decode("utf-8", "replace"))
                self._stream.flush()

    def _use(self, stream: Any) -> None:
        self.flush()  # lines for the old stream go to it
        self._stream = stream
        self._flush = not getattr(stream, "line_buffering", False)
        self._fd = -1
        encoding = (getattr(stream, "encoding", "") or "").lower().replace("-", "")
        # stderr is line-buffered on a terminal and write-through elsewhere (a pipe, a file: where a
        # service's logs go); either way the text layer holds nothing between two whole lines.
        whole_lines = not self._flush or getattr(stream, "write_through", False)
        if self._json and whole_lines and encoding == "utf8":
            try:
                self._fd = stream.fileno()
            except (AttributeError, OSError, ValueError):  # no descriptor behind it (StringIO)
                self._fd = -1


def _text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "-"
    return str(value)


#: The process's access record writer; None: no access records (``logging.access`` off).
ACCESS: AccessLog | None = None
_subscribers: list[Callable[[AccessLog | None], None]] = []


def subscribe(use: Callable[[AccessLog | None], None]) -> None:
    """Call ``use`` with the writer in use now, and again with each one :func:`install` puts in its place."""
    _subscribers.append(use)
    use(ACCESS)


def install(writer: AccessLog | None) -> None:
    """Make ``writer`` the process's access record writer (None: no records); the old one's lines are written."""
    global ACCESS
    if ACCESS is not None:
        ACCESS.flush()
    ACCESS = writer
    for use in _subscribers:
        use(writer)


@atexit.register
def _flush_access() -> None:
    """Lines of the last loop turn, when the loop stopped before that turn ended."""
    if ACCESS is not None:
        ACCESS.flush()
