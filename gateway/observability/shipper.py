"""Ships finished spans from the gateway process to its exporter process, never blocking a request.

The exporter (``python -m gateway.observability.exporter``) is a child of each worker process, fed over
its stdin with length-prefixed frames: a 4-byte big-endian length, then orjson. The first frame is
the configuration (the collector's headers are secrets: they travel only on this pipe, never on
the command line or in the environment); each later frame is a list of requests' entries (``Entry``
in ``gateway/observability/span_entries.py``).

The event loop encodes a request's entry (one orjson call) and appends the bytes to a deque
(``submit``): nothing of them stays for the garbage collector to walk, and the writer thread only
joins bytes. The writer drains the deque every ``FLUSH_INTERVAL_S`` (sooner when ``BATCH_SPANS``
are waiting), packs the requests into frames and writes them, blocking on the pipe when the
child is slow, which is why the deque is bounded: beyond ``max_buffered_spans`` a request's spans
are dropped and counted in ``loopgate_trace_spans_dropped_total`` (as are a request whose spans
alone are over the frame limit, and one that cannot be encoded). A child that dies is restarted
with backoff; what was in the frame being written is dropped (counted), what the child had
already read is lost with it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson

from gateway import __version__
from gateway.config.observability_section import ObservabilityConfig
from gateway.observability import metrics
from gateway.observability.logs import JsonFormatter

logger = logging.getLogger("loopgate.tracing")

#: The writer wakes at least this often (and when ``BATCH_SPANS`` spans are waiting).
FLUSH_INTERVAL_S = 0.2
BATCH_SPANS = 512
#: Restart delays after the exporter process died: doubling from the first to the last.
RESTART_BACKOFF_S = (0.5, 30.0)
#: Drops are logged at most this often (the counter has every one).
DROP_LOG_INTERVAL_S = 60.0
DROP_REASONS = ("buffer_full", "exporter_down", "too_large", "unencodable")
#: the exporter process runs ``python -m`` this
EXPORTER_MODULE = "gateway.observability.exporter"
_HEADER = struct.Struct(">I")
_dumps = orjson.dumps


def frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


def packed(entries: list[tuple[int, bytes]], frame_max: int) -> Iterator[tuple[int, bytes]]:
    """Encoded requests joined into JSON arrays of at most ``frame_max`` bytes: ``(spans, payload)`` each.

    Every entry fits a frame alone (``submit`` dropped the others); order is kept."""
    spans = 0
    size = 2  # "[" and "]"
    batch: list[bytes] = []
    for count, encoded in entries:
        if batch and size + 1 + len(encoded) > frame_max:
            yield spans, b"[" + b",".join(batch) + b"]"
            spans, size, batch = 0, 2, []
        spans += count
        size += len(encoded) + (1 if batch else 0)
        batch.append(encoded)
    if batch:
        yield spans, b"[" + b",".join(batch) + b"]"


class Shipper:
    def __init__(self, config: ObservabilityConfig) -> None:
        self.config = config
        self.max_spans = config.max_buffered_spans
        self.frame_max = config.max_frame_bytes
        self._entry_max = self.frame_max - 2  # a frame is a JSON array: "[" entries "]"
        self._queue: collections.deque[tuple[int, bytes]] = collections.deque()  # (spans, encoded request)
        # Spans queued (only the event loop adds) and spans taken off (only the writer adds): the
        # difference is what is buffered, with no lock on the request path.
        self._queued = 0
        self._taken = 0
        self._next_wake = BATCH_SPANS
        self._wake = threading.Event()
        self._stopping = threading.Event()  # ends a restart's backoff at once
        self._closing = False
        self._drop_lock = threading.Lock()
        self._dropped_unlogged: dict[str, int] = {}
        self._last_drop_log = 0.0
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        for reason in DROP_REASONS:  # every series exists from the start: later increments add no key that
            metrics.TRACE_SPANS_DROPPED.inc(reason, amount=0)  # a /metrics render could be iterating over
        self._spawn()
        self._writer = threading.Thread(target=self._run, name="loopgate-trace-shipper", daemon=True)
        self._writer.start()

    # -- the event loop's side -------------------------------------------------------------------

    def submit(self, entry: list[Any], count: int) -> None:
        """Queue one request's entry of ``count`` spans, encoded (dropped, and counted, when it cannot go)."""
        queued = self._queued + count
        if queued - self._taken > self.max_spans or self._closing:
            self.drop("exporter_down" if self._closing else "buffer_full", count)
            return
        try:
            encoded = _dumps(entry, default=str)
        except orjson.JSONEncodeError:  # an integer past 64 bits (a caller's max_tokens, say)
            self.drop("unencodable", count)
            return
        if len(encoded) > self._entry_max:
            self.drop("too_large", count)
            return
        self._queue.append((count, encoded))
        self._queued = queued
        if queued >= self._next_wake:
            self._next_wake = queued + BATCH_SPANS
            self._wake.set()

    def buffered(self) -> int:
        return self._queued - self._taken

    # -- both sides --------------------------------------------------------------------------------

    def drop(self, reason: str, count: int) -> None:
        if not count:
            return
        with self._drop_lock:
            metrics.TRACE_SPANS_DROPPED.inc(reason, amount=count)
            self._dropped_unlogged[reason] = self._dropped_unlogged.get(reason, 0) + count
            now = time.monotonic()
            if now - self._last_drop_log < DROP_LOG_INTERVAL_S:
                return
            self._last_drop_log = now
            dropped, self._dropped_unlogged = self._dropped_unlogged, {}
        logger.warning("trace spans dropped (%s); see loopgate_trace_spans_dropped_total",
                       ", ".join(f"{reason}: {count}" for reason, count in sorted(dropped.items())))

    # -- the writer thread -----------------------------------------------------------------------

    def _spawn(self) -> None:
        """Start the exporter process and send it its configuration (the first frame)."""
        root = logging.getLogger()
        json_logs = any(isinstance(h.formatter, JsonFormatter) for h in root.handlers)
        settings = {"endpoint": self.config.otlp_endpoint, "headers": dict(self.config.headers),
                    "service_name": self.config.service_name, "service_version": __version__,
                    "frame_max": self.frame_max, "log_format": "json" if json_logs else "text",
                    "log_level": logging.getLevelName(root.getEffectiveLevel())}
        self.process = subprocess.Popen([sys.executable, "-m", EXPORTER_MODULE], stdin=subprocess.PIPE,
                                        close_fds=True)
        self._write(frame(orjson.dumps(settings)))

    def _write(self, data: bytes) -> None:
        assert self.process is not None and self.process.stdin is not None
        fd = self.process.stdin.fileno()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _run(self) -> None:
        try:
            self._loop()
        except Exception:  # a bug here must not pass silently: spans would pile up until dropped
            logger.exception("the trace shipper stopped; spans are dropped from now on")
            self._closing = True

    def _loop(self) -> None:
        backoff = RESTART_BACKOFF_S[0]
        while True:
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            closing = self._closing
            if self.process is None:  # dead: restart after the backoff, dropping what waits meanwhile
                if closing:
                    self._discard("exporter_down")
                    return
                restarted = self._restart(backoff)
                backoff = min(backoff * 2, RESTART_BACKOFF_S[1])  # back to the first once a frame got through
                if not restarted:
                    continue
            if self.process is None or self.process.poll() is not None:
                self._lost()  # died while idle: restarted before spans queue up
                continue
            try:
                if self._flush():
                    backoff = RESTART_BACKOFF_S[0]
            except OSError:  # BrokenPipeError: the child is gone
                self._lost()
                continue
            if closing and not self._queue:
                self._close_pipe()
                return

    def _flush(self) -> bool:
        """Write what is queued as frames of at most ``frame_max`` bytes; True when something was written."""
        queue = self._queue
        popleft = queue.popleft
        entries = [popleft() for _ in range(len(queue))]  # the event loop may append meanwhile: those wait
        if not entries:
            return False
        count = sum([spans for spans, _ in entries])
        taken = self._taken
        try:
            for frame_count, payload in packed(entries, self.frame_max):
                self._write(frame(payload))
                self._taken += frame_count
        except OSError:  # BrokenPipeError: the child is gone with what was not written yet
            unsent = count - (self._taken - taken)
            self._taken += unsent
            self.drop("exporter_down", unsent)
            raise
        return True

    def _lost(self) -> None:
        process = self.process
        self.process = None
        if process is not None:
            self._close_stdin(process)
            code = process.poll()
            if code is None:
                process.kill()
                code = process.wait()
            logger.error("the trace exporter process exited (%s); restarting it", code)

    def _restart(self, delay: float) -> bool:
        self._discard("exporter_down")
        if self._stopping.wait(delay):  # shutting down meanwhile: no new process
            return False
        try:
            self._spawn()
        except OSError as exc:
            logger.error("could not restart the trace exporter process: %s", exc)
            self._lost()
            return False
        self.restarts += 1
        return True

    def _discard(self, reason: str) -> None:
        count = 0
        while self._queue:
            count += self._queue.popleft()[0]
        self._taken += count
        self.drop(reason, count)

    @staticmethod
    def _close_stdin(process: subprocess.Popen[bytes]) -> None:
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()

    def _close_pipe(self) -> None:
        if self.process is not None:
            self._close_stdin(self.process)

    # -- shutdown ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, close the child's stdin (its processor exports the rest), wait a bounded time, then kill it."""
        timeout = self.config.shutdown_timeout_s
        deadline = time.monotonic() + timeout
        self._closing = True
        self._stopping.set()
        self._wake.set()
        self._writer.join(timeout)
        process = self.process
        if process is None:
            return
        if self._writer.is_alive():  # stuck writing to a child that stopped reading
            process.kill()
            self._writer.join(1.0)
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning("the trace exporter process did not finish within %.0f s; killed", timeout)
            process.kill()
            process.wait()
