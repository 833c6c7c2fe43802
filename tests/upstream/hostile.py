"""A scripted raw-socket upstream for transport tests, and the hostile behaviours a provider
(or something pretending to be one) can show: giant heads, endless bodies, compression bombs,
drips, early answers, resets.

The servers are real asyncio socket servers on 127.0.0.1, so framing, keep-alive, timeouts and
connection handling are exercised exactly as against a provider; each test scripts the bytes.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Self

from gateway.config.transport import PoolLimits, Timeouts
from gateway.upstream.http1 import Http1Client

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


class LocalServer:
    """A socket server on 127.0.0.1 for the length of an ``async with``; subclasses serve."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._track, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # Handlers still holding a connection (a hostile one sleeps on it) end with the server.
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            pass  # the server is shutting down; a cancelled handler task would be logged by asyncio
        finally:
            self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class Server(LocalServer):
    """Accepts connections, parses each request head and body, lets ``handler`` answer."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.closed_by_peer = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        self.requests.append((head, body))
        return head

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.close()


def response(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
            + extra + b"\r\n" + body)


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    while await server.read_request(reader) is not None:
        writer.write(response(b'{"ok":true}'))
        await writer.drain()


def answer_once(*parts: bytes, pause_s: float = 0.0, hold_s: float = 0.0) -> Handler:
    """Reads one request, writes ``parts`` (``pause_s`` apart), keeps the connection ``hold_s``
    seconds, then closes it."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        for index, part in enumerate(parts):
            if index and pause_s:
                await asyncio.sleep(pause_s)
            writer.write(part)
            await writer.drain()
        if hold_s:
            await asyncio.sleep(hold_s)

    return handler


TIMEOUTS = Timeouts(connect=2.0, read=5.0)
LIMITS = PoolLimits(max_connections=10)


def with_timeouts(**changes: float) -> Timeouts:
    """The test client's timeouts with ``changes`` (``read=0.2``)."""
    return replace(TIMEOUTS, **changes)


def with_limits(**changes: float) -> PoolLimits:
    """The test client's limits with ``changes`` (``max_connections=1``)."""
    return replace(LIMITS, **changes)


def client(**overrides: object) -> Http1Client:
    options: dict[str, object] = {"timeouts": TIMEOUTS, "limits": LIMITS,
                                  "extra_head": "User-Agent: loopgate-test\r\n", "tls": None}
    options.update(overrides)
    return Http1Client(**options)  # type: ignore[arg-type]


BODY = b'{"model":"m","messages":[]}'
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-test"}


def answering_after(delay_s: float) -> Handler:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            await asyncio.sleep(delay_s)
            writer.write(response(b"{}"))
            await writer.drain()

    return slow


class ForwardProxy(LocalServer):
    """CONNECT tunnels and absolute-form HTTP, both piped to ``routes[host:port]``."""

    def __init__(self, routes: dict[str, tuple[str, int]], refuse: bytes | None = None) -> None:
        super().__init__()
        self.routes = routes
        self.refuse = refuse
        self.heads: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
            if self.refuse is not None:
                writer.write(self.refuse)
                await writer.drain()
                return
            if method == "CONNECT":
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.routes[target])
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pending = b""
            else:  # absolute form: http://host:port/path
                authority = target.split("/")[2]
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.routes[authority])
                pending = head
            upstream_writer.write(pending)
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def drip(head: bytes, byte: bytes = b" ", every_s: float = 0.05) -> Handler:
    """Reads one request, sends ``head``, then one byte every ``every_s`` forever: each gap far
    inside any read timeout, the body never complete."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(head)
        while True:
            await writer.drain()
            await asyncio.sleep(every_s)
            writer.write(byte)

    return handler


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Accepts the connection and never says a thing (a TLS handshake or a head that never comes)."""
    await reader.read()


def endless(head: bytes, piece: bytes) -> Handler:
    """Reads one request, sends ``head`` and then ``piece`` again and again until the client goes."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(head)
        while not writer.is_closing():
            writer.write(piece)
            await writer.drain()

    return handler


def reset_after(*parts: bytes) -> Handler:
    """Reads one request, sends ``parts``, then resets the connection (RST, not a clean FIN)."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        for part in parts:
            writer.write(part)
            await writer.drain()
        await asyncio.sleep(0.05)  # let the client read what was sent before the reset hits
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    return handler


def answer_before_the_body(answer: bytes, then: Handler) -> Handler:
    """The first connection reads only the request head, answers at once (an early 413) and
    never reads the body; later connections are served by ``then``."""
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        if server.connections > 1:
            await then(reader, writer, server)
            return
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        await asyncio.sleep(30)

    return handler


async def never_reads_the_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Reads the request head, then neither reads nor answers: the client's send stalls (window full)."""
    await reader.readuntil(b"\r\n\r\n")
    await asyncio.sleep(30)
