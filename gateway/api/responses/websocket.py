"""The WebSocket mode of ``/v1/responses``: many ``response.create`` turns over one connection (OpenAI's).

**The upgrade** (``GET /v1/responses`` with ``Upgrade: websocket``) is a request of its own,
checked before the connection is accepted: the key (``Authorization: Bearer``, as the HTTP
surface), its role, a budget this process already saw spent, and the connection caps
(``websocket.max_connections``, ``max_connections_per_key``). A refusal is the HTTP answer of the
handshake (401, 403, 429 in OpenAI's error shape), never an accepted socket.

**Each turn is an HTTP POST of the Responses surface**, run by the one driver: the message is
handed to ``driver.drive`` as the body of a request with the connection's headers
(``Incoming.for_message``), so a turn goes through exactly the lifecycle of ``POST
/v1/responses`` with ``stream: true`` — authenticate (a key revoked since the upgrade is refused,
and the connection closed), parse, plan and allow, new / continued / resumed, budget and
admission (rate limits and a concurrency slot per turn), watch, render, settle — and its answer
(the SSE body, or an error) is played onto the socket (:class:`Player`): each SSE frame becomes a
message holding its ``data``, an error answer an ``error`` event. Failover, the tool loop and
pauses are the surface's own. ``previous_response_id`` reaches the connection's own ``store:
false`` responses (``ws_records.ConnectionRecords``).

**One turn runs at a time**, in order: a ``response.create`` sent while one runs waits behind it
(at most ``websocket.max_queued_turns``; past that, an ``error`` event). The socket is read all
the time, so a client that goes away is seen at once: a turn not yet streaming is cancelled, a
streaming one is ended as an SSE client's disconnect ends it. Either way what it was admitted is
given back (its slot, its estimate, a claimed pause), by the driver and the SSE body's own
``finally``.

**Bounds** (``websocket.*``, docs/surfaces/responses.md): a message past ``max_message_bytes`` is
refused by the protocol from its frame header (close 1009); ``max_messages`` per connection;
``idle_timeout_s`` between turns (close 1000); ``max_connection_s`` (no turn starts after it:
``websocket_connection_limit_reached``, then close 1000, as OpenAI's 60-minute limit).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from gateway.api.driver import Mounted, drive
from gateway.api.request.lifecycle import Work
from gateway.api.responses.ws_messages import (
    CREATE,
    PROCESSED,
    SSEEvents,
    binary_refused,
    create_body,
    error_event,
    gateway_error_event,
    parse_message,
    unknown_type,
)
from gateway.api.responses.ws_records import ConnectionRecords
from gateway.config.websocket_section import WebSocketConfig
from gateway.errors import GatewayError
from gateway.http.incoming import Incoming
from gateway.http.request_id import REQUEST_ID_HEADER, request_id

log = logging.getLogger("loopgate.api")

PATH = "/v1/responses"
#: close codes (RFC 6455): the end of an idle or spent connection, a message too large, a key refused
NORMAL, TOO_BIG, POLICY = 1000, 1009, 1008
#: what the access record and the span name a turn's method as
TURN = "WS"
LIMIT_CODE = "websocket_connection_limit_reached"
#: the queue's sign that the connection is over (the client left, or a bound closed it)
_END: Any = None


class ResponsesSockets:
    """Every WebSocket connection of ``/v1/responses`` in one worker: the upgrade's checks, the caps, then a
    :class:`Connection` each. ``mounted`` is the Responses surface with its bundle (the app's front)."""

    def __init__(self, mounted: Mounted, settings: WebSocketConfig) -> None:
        self.mounted = mounted
        self.settings = settings
        #: open connections: in this worker, and per key id
        self.open = 0
        self.per_key: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        incoming = Incoming(scope, receive)
        rid = request_id(incoming.request_id)
        headers = [(REQUEST_ID_HEADER, rid)]
        # Recorded (access record, span), never metered: the latency of /v1/responses is its turns'.
        work = self.mounted.lifecycle.begin("GET", PATH, incoming, rid=rid, metered=False)
        try:
            key_id = await self._admit(work)
        except BaseException as exc:  # given back (nothing is held yet); an exit is raised again
            await refuse(scope, send, await work.failed(exc), headers)
            return
        work.done(101)
        await send({"type": "websocket.accept", "headers": headers})
        self.open += 1
        self.per_key[key_id] = self.per_key.get(key_id, 0) + 1
        try:
            await Connection(self, incoming, receive, send).run()
        finally:
            self.open -= 1
            left = self.per_key.pop(key_id) - 1
            if left:
                self.per_key[key_id] = left

    async def _admit(self, work: Work) -> str:
        """The key and the caps, before the connection is accepted; its key's id (the per-key count)."""
        key = await work.authenticate()
        meter, work.meter = work.meter, None  # the upgrade spends nothing: no usage row (each turn has its own)
        if key.role == "approver":
            raise GatewayError(403, f"key {key.name!r} has the approver role: it may list and decide approvals "
                                    "but not call models", "permission_error", None, "approver_key")
        if meter is not None:
            meter.check_spent()
        settings, key_id = self.settings, key.id or key.name
        if settings.max_connections and self.open >= settings.max_connections:
            raise _too_many(f"this gateway process has {self.open} WebSocket connections open, its limit "
                            "(websocket.max_connections)")
        held = self.per_key.get(key_id, 0)
        if settings.max_connections_per_key and held >= settings.max_connections_per_key:
            raise _too_many(f"this key has {held} WebSocket connections open on this gateway process, its limit "
                            "(websocket.max_connections_per_key); close one, or use POST /v1/responses")
        return key_id


def _too_many(message: str) -> GatewayError:
    return GatewayError(429, message, "rate_limit_error", None, "too_many_connections", {"Retry-After": "1"})


async def refuse(scope: Scope, send: Send, error: GatewayError, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer a WebSocket handshake with an HTTP error in OpenAI's shape (the server's denial response), or,
    where the server has no such extension, close it (the server answers 403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": POLICY})
        return
    body = error.body()
    raw = [(b"content-type", b"application/json"), *headers,
           *[(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in error.headers.items()]]
    await send({"type": "websocket.http.response.start", "status": error.status, "headers": raw})
    await send({"type": "websocket.http.response.body", "body": body})


class Connection:
    """One accepted connection: its reader, its turns in order, its bounds (the module docstring)."""

    def __init__(self, sockets: ResponsesSockets, incoming: Incoming, receive: Receive, send: Send) -> None:
        settings = self.settings = sockets.settings
        mounted = sockets.mounted
        records = ConnectionRecords(mounted.services.records, settings.kept_responses, settings.kept_bytes)
        #: the Responses surface as this connection's turns run it: reading the connection's own responses too
        self.mounted = Mounted(mounted.surface, dataclasses.replace(mounted.services, records=records),
                               mounted.lifecycle)
        self.incoming = incoming
        self._receive = receive
        self._send = send
        self.queue: asyncio.Queue[tuple[dict[str, Any], int] | None] = asyncio.Queue()
        self.messages = 0
        self.started = time.monotonic()
        self.gone = asyncio.Event()  # the client left, or the connection was closed: no turn starts any more
        self.left = False  # the client left (nothing can be sent)
        self.closed = False  # the close frame was sent
        self.ending = False  # a bound was reached: the running and accepted turns end, nothing more is taken
        self.running: asyncio.Task[int] | None = None  # the turn under way
        self.streaming = False  # its answer is being played (a drop then ends it as an SSE client's would)

    async def run(self) -> None:
        reader = asyncio.create_task(self._read())
        try:
            await self._serve()
        finally:
            reader.cancel()
            await asyncio.wait([reader])
            await self.close(NORMAL, "connection limit reached" if self.ending else "")

    # -- turns, one at a time --------------------------------------------------------------------
    async def _serve(self) -> None:
        settings = self.settings
        end = self.started + settings.max_connection_s
        lifetime = (f"this connection reached its lifetime of {settings.max_connection_s:g} s "
                    "(websocket.max_connection_s)")
        while True:
            wait = min(settings.idle_timeout_s, end - time.monotonic())
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    turn = await self.queue.get()
            except TimeoutError:
                if time.monotonic() >= end:
                    await self._limit_reached(lifetime)
                else:
                    await self.close(NORMAL, "idle timeout (websocket.idle_timeout_s)")
                return
            if turn is None or self.gone.is_set():  # _END
                return
            if time.monotonic() >= end:
                await self._limit_reached(lifetime + "; the turn was not run")
                return
            if await self._run_turn(turn[0], turn[1]) == 401:  # the key was revoked or expired since the upgrade
                await self.close(POLICY, "the key was refused")
                return

    async def _run_turn(self, body: dict[str, Any], size: int) -> int:
        """The turn's answer's status (0 when the client left before it was given)."""
        task = self.running = asyncio.create_task(self._turn(body, size))
        try:
            return await task
        except asyncio.CancelledError:
            if not task.cancelled() or _cancelling():
                raise  # this connection is being stopped (the server shuts down)
            return 0  # cancelled before its stream began because the client left: the driver gave back what it held
        except OSError:  # the socket went away while the answer was written (the SSE body gave back what it held)
            return 0
        finally:
            self.running = None

    async def _turn(self, body: dict[str, Any], size: int) -> int:
        answer = await drive(self.mounted, self.incoming.for_message(body, size), TURN)
        self.streaming = True
        player = Player(self)
        try:
            await answer({"type": "http"}, self._gone_receive, player.send)
        finally:
            self.streaming = False
        return player.status

    async def _gone_receive(self) -> Message:
        """What an answer's disconnect watcher waits on (the SSE body's): the client leaving."""
        await self.gone.wait()
        return {"type": "http.disconnect"}

    # -- reading ---------------------------------------------------------------------------------
    async def _read(self) -> None:
        """Every message, as it arrives (so a client leaving is seen while a turn runs)."""
        try:
            while True:
                message = await self._receive()
                if message["type"] == "websocket.disconnect":
                    self.left = True
                    return
                if message["type"] == "websocket.receive" and not (self.ending or self.closed):
                    await self._take(message)
        except OSError:  # the socket failed under an error event: the client is gone
            self.left = True
        finally:
            self._stop()

    def _stop(self) -> None:
        """No turn starts any more; one under way is cancelled if the client left before its answer began."""
        self.gone.set()
        running = self.running
        if running is not None and not self.streaming and self.left:
            running.cancel()
        self.queue.put_nowait(_END)

    async def _take(self, message: Message) -> None:
        settings = self.settings
        self.messages += 1
        if self.messages > settings.max_messages:
            await self._limit_reached(f"this connection sent {settings.max_messages} messages, its limit "
                                      "(websocket.max_messages)")
            return
        text = message.get("text")
        if text is None:
            await self.send_text(gateway_error_event(binary_refused()))
            return
        if len(text) > settings.max_message_bytes:  # the protocol's own bound (bytes) holds before this one
            await self.close(TOO_BIG, "message too big (websocket.max_message_bytes)")
            return
        try:
            parsed = parse_message(text)
            kind = parsed["type"]
            if kind == PROCESSED:
                return
            if kind != CREATE:
                raise unknown_type(kind)
            body = create_body(parsed)
            waiting = self.queue.qsize() + (self.running is not None)
            if waiting > settings.max_queued_turns:
                raise GatewayError(409, f"a response is running on this connection and {waiting - 1} wait behind "
                                   f"it, the limit (websocket.max_queued_turns): wait for a terminal event, or "
                                   "open another connection", "invalid_request_error", None,
                                   "response_already_in_progress")
        except GatewayError as error:
            await self.send_text(gateway_error_event(error))
            return
        self.queue.put_nowait((body, len(text)))

    # -- writing ---------------------------------------------------------------------------------
    async def send_text(self, text: str) -> None:
        if not (self.closed or self.left):
            await self._send({"type": "websocket.send", "text": text})

    async def _limit_reached(self, message: str) -> None:
        """OpenAI's end of a spent connection: ``websocket_connection_limit_reached``; then (once the turns it
        accepted are over) a normal close. Clients such as Codex open a new connection and go on."""
        self.ending = True
        error = GatewayError(400, message + "; open a new connection to continue", "invalid_request_error", None,
                             LIMIT_CODE)
        await self.send_text(gateway_error_event(error))
        self.queue.put_nowait(_END)

    async def close(self, code: int, reason: str) -> None:
        """Send the close frame once (a turn under way is cancelled first: nothing may follow the frame)."""
        if self.closed:
            return
        self.closed = True
        running = self.running
        if running is not None and running is not asyncio.current_task():
            running.cancel()
            await asyncio.wait([running])
        if not self.left:
            with contextlib.suppress(OSError, RuntimeError):  # gone meanwhile
                await self._send({"type": "websocket.close", "code": code, "reason": reason})
        self._stop()


class Player:
    """An HTTP answer of the Responses surface played onto the socket: the ASGI ``send`` it is given.

    A stream's SSE frames become one message each (their ``data``); any other answer (an error before
    the first event) one ``error`` event with its status and rate-limit headers.
    """

    __slots__ = ("_body", "_connection", "_events", "_headers", "status")

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self.status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._events: SSEEvents | None = None
        self._body: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self._headers = list(message.get("headers") or ())
            if self.status == 200 and (b"content-type", b"text/event-stream; charset=utf-8") in self._headers:
                self._events = SSEEvents()
            return
        body = message.get("body", b"")
        events = self._events
        if events is not None:
            send = self._connection.send_text
            for data in events.feed(body):
                await send(data.decode())
            return
        self._body.append(body)
        if not message.get("more_body", False):
            raw = b"".join(self._body)
            await self._connection.send_text(raw.decode() if self.status == 200 else
                                             error_event(self.status, raw, self._headers))


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
