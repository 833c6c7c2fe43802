"""One accepted WebSocket connection of ``/v1/responses``: its messages, its turns in order, its bounds.

The connection's own task reads the socket and runs each turn in place, as an HTTP POST of the
Responses surface (``driver.drive``, ``Incoming.for_message``), then plays the answer onto the
socket (:class:`Player`). While a turn's stream is played, the socket is read by the stream's
own disconnect watcher (the SSE body's, as for an HTTP client): its ``receive`` here
(``_turn_receive``) takes the messages that arrive meanwhile — another ``response.create`` waits
behind the running turn (at most ``websocket.max_queued_turns``), anything else is answered at
once — and reports the client leaving, which ends the stream and gives back what the turn holds,
exactly as an SSE client's disconnect does. Before its answer begins (a model slow to its first
token, a long server tool) nothing reads the socket: the server protocol says when the connection
is lost (``http/websocket_server.WebSocketServerProtocol``), and the turn is cancelled then
(``_lost``). One task and one timer per connection, no task, queue or timer per turn.

Bounds: ``max_messages`` (then ``websocket_connection_limit_reached``; the turns already accepted
run, then the connection closes), ``max_message_bytes`` (the protocol's own check closes with 1009
before the message is read; this one holds for any server), ``idle_timeout_s`` counted from the
end of the last turn and ``max_connection_s`` (one timer, ``_tick``: close 1000, after
``websocket_connection_limit_reached`` for the lifetime; a turn due after the lifetime is not run).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import operator
import time
from typing import Any

from starlette.types import Message, Receive, Send

from gateway.api.driver import Mounted, drive
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
from gateway.api.responses.ws_prepared import PreparedSurface
from gateway.api.responses.ws_records import ConnectionRecords
from gateway.api.services import ResponsesServices
from gateway.config.websocket_section import WebSocketConfig
from gateway.errors import GatewayError
from gateway.http.incoming import Incoming
from gateway.http.websocket_frames import FRAMES_TYPE, FrameWriter, frame_writer, framed, framed_events
from gateway.observability.metrics import WEBSOCKET_CLOSES

#: close codes (RFC 6455): the end of an idle or spent connection, a message too large, a key refused
NORMAL, TOO_BIG, POLICY = 1000, 1009, 1008
#: what the access record and the span name a turn's method as
TURN = "WS"
LIMIT_CODE = "websocket_connection_limit_reached"
_HTTP: dict[str, Any] = {"type": "http"}
_DISCONNECT: Message = {"type": "http.disconnect"}
#: a turn to run: its body, its size, the surface that runs it (the Responses surface, or ``generate: false``'s)
Turn = tuple[dict[str, Any], int, Mounted]
#: the Responses bundle's fields a connection shares (all but its records)
_SHARED = tuple(field.name for field in dataclasses.fields(ResponsesServices) if field.name != "records")
_shared_fields = operator.attrgetter(*_SHARED)


class Connection:
    """One accepted connection; see the module docstring. ``run`` until the client leaves or a bound ends it."""

    def __init__(self, mounted: Mounted, settings: WebSocketConfig, incoming: Incoming, receive: Receive,
                 send: Send) -> None:
        self.settings = settings
        shared: ResponsesServices = mounted.services
        records = ConnectionRecords(shared.records, settings.kept_responses, settings.kept_bytes)
        #: the Responses surface as this connection's turns run it: reading the connection's own responses too
        # (the bundle copied field by field: ``dataclasses.replace`` inspects the class each time, ~25k instructions)
        services = ResponsesServices(records=records, **dict(zip(_SHARED, _shared_fields(shared), strict=True)))
        self.records = records
        self.mounted = Mounted(mounted.surface, services, mounted.lifecycle)
        self._prepared: Mounted | None = None  # the ``generate: false`` surface, made when first needed
        self.incoming = incoming
        self._receive = receive
        self._send = send
        #: events written straight to the server's connection, several per write (None: one ASGI send each)
        self.writer: FrameWriter | None = frame_writer(send)
        self.waiting: collections.deque[Turn] = collections.deque()  # turns sent while one ran, in order
        self.messages = 0
        self.started = self.last = time.monotonic()  # ``last``: when the last turn ended (idle since)
        self.end = self.started + settings.max_connection_s
        self.running = False
        self.streaming = False  # a turn's answer is being played (its stream's watcher then sees the client leave)
        self.left = False  # the client left: nothing more can be sent
        self.closed = False  # the close frame was sent
        self.ending = False  # a bound was reached: the accepted turns run, nothing more is taken
        self._timer: asyncio.TimerHandle | None = None
        self._expiry: asyncio.Task[None] | None = None
        self.task: asyncio.Task[Any] | None = None  # the connection's own task: its turns run in it
        self.dropped = False  # the client left while a turn had no answer yet: that turn was cancelled
        #: why the connection ended (``loopgate_websocket_closes_total{reason}``)
        self.why = "client"

    async def run(self) -> None:
        self.task = asyncio.current_task()
        if self.writer is not None:
            self.writer.when_lost(self._lost)
        self._arm(min(self.settings.idle_timeout_s, self.settings.max_connection_s))
        try:
            while not (self.left or self.closed):
                if self.waiting:
                    await self._turn(*self.waiting.popleft())
                    continue
                if self.ending:
                    break
                message = await self._receive()
                if message["type"] == "websocket.disconnect":
                    self._left(message)
                elif message["type"] == "websocket.receive":
                    turn = await self._take(message)
                    if turn is not None:
                        await self._turn(*turn)
        finally:
            if self._timer is not None:
                self._timer.cancel()
            if self._expiry is not None:
                await asyncio.wait([self._expiry])
            await self.close(NORMAL, "connection limit reached" if self.ending else "", self.why)
            WEBSOCKET_CLOSES.inc(self.why)

    def _left(self, message: Message) -> None:
        """The client closed the connection or went away (or the server is shutting down: 1012)."""
        self.left = True
        if not self.closed:
            self.why = "shutdown" if message.get("code") == 1012 else "client"

    # -- turns -----------------------------------------------------------------------------------
    async def _turn(self, body: dict[str, Any], size: int, mounted: Mounted) -> None:
        """One turn through the driver, its answer played onto the socket."""
        if self.closed or self.left:
            return
        if time.monotonic() >= self.end:
            await self._limit_reached(f"this connection reached its lifetime of {self.settings.max_connection_s:g} "
                                      "s (websocket.max_connection_s); the turn was not run", "lifetime")
            return
        self.running = True
        player = Player(self)
        try:
            answer = await drive(mounted, self.incoming.for_message(body, size, self.writer is not None), TURN)
            self.streaming = True
            await answer(_HTTP, self._turn_receive, player.send)
        except asyncio.CancelledError:
            task = self.task
            if not self.dropped or task is None:
                raise  # the connection is being stopped
            task.uncancel()  # the client left before the answer began: the driver gave back what the turn held
        except OSError:  # the socket went away under the answer (the SSE body gave back what the turn held)
            if not self.closed:
                self.left = True
        finally:
            self.running = self.streaming = False
            self.last = time.monotonic()
        previous = body.get("previous_response_id")
        if player.status != 200 and isinstance(previous, str):
            # A continuation that failed forgets the response it named (Open Responses: a client resends its
            # whole conversation after a failure rather than chaining onto state it cannot see).
            self.records.forget(previous)
        if player.status == 401:  # the key was revoked or expired since the upgrade: nothing more can run
            await self.close(POLICY, "the key was refused", "key_refused")

    def _lost(self) -> None:
        """The server saw the connection go (``WebSocketServerProtocol``): a turn that has no answer yet is cancelled
        at once (the driver gives back what it holds); one answering is ended by its stream's watcher."""
        if self.closed:
            return
        self.left = True
        if self.running and not self.streaming and self.task is not None:
            self.dropped = True
            self.task.cancel()

    async def _turn_receive(self) -> Message:
        """The socket, read by a stream's disconnect watcher while the stream plays: every message taken, and
        ``http.disconnect`` (which ends the stream) once the client leaves or the connection is closed."""
        while not (self.left or self.closed):
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._left(message)
            elif message["type"] == "websocket.receive":
                turn = await self._take(message)
                if turn is not None:
                    self.waiting.append(turn)
        return _DISCONNECT

    async def _take(self, message: Message) -> Turn | None:
        """A client's message: a turn to run (a ``response.create``), or None (answered, or nothing to do)."""
        if self.ending or self.closed:
            return None
        settings = self.settings
        self.messages += 1
        if self.messages > settings.max_messages:
            await self._limit_reached(f"this connection sent {settings.max_messages} messages, its limit "
                                      "(websocket.max_messages)", "messages")
            return None
        text = message.get("text")
        if text is None:
            await self.send_text(gateway_error_event(binary_refused()))
            return None
        if len(text) > settings.max_message_bytes:
            await self.close(TOO_BIG, "message too big (websocket.max_message_bytes)", "too_big")
            return None
        try:
            parsed = parse_message(text)
            kind = parsed["type"]
            if kind == PROCESSED:  # Codex acknowledges each response it has read
                return None
            if kind != CREATE:
                raise unknown_type(kind)
            body, generate = create_body(parsed)
            if self.running and len(self.waiting) >= settings.max_queued_turns:
                raise GatewayError(409, f"a response is running on this connection and {len(self.waiting)} wait "
                                   "behind it, the limit (websocket.max_queued_turns): wait for a terminal event, "
                                   "or open another connection", "invalid_request_error", None,
                                   "response_already_in_progress")
        except GatewayError as error:
            await self.send_text(gateway_error_event(error))
            return None
        return body, len(text), self.mounted if generate else self.prepared()

    def prepared(self) -> Mounted:
        """The surface of ``generate: false`` turns, over the same services."""
        if self._prepared is None:
            mounted = self.mounted
            self._prepared = Mounted(PreparedSurface(mounted.surface.path), mounted.services, mounted.lifecycle)
        return self._prepared

    # -- bounds ----------------------------------------------------------------------------------
    def _arm(self, delay: float) -> None:
        self._timer = asyncio.get_running_loop().call_later(max(delay, 0.0), self._tick)

    def _tick(self) -> None:
        """The idle and lifetime clock: one timer, moved along rather than set per turn."""
        self._timer = None
        if self.closed or self.left or self._expiry is not None:
            return
        now = time.monotonic()
        due = min(self.end, self.last + self.settings.idle_timeout_s)
        if self.running or self.waiting or now < due:
            self._arm(self.settings.idle_timeout_s if self.running else due - now)
            return
        self._expiry = asyncio.ensure_future(self._expire(now >= self.end))

    async def _expire(self, lifetime: bool) -> None:
        if lifetime:
            await self._limit_reached(f"this connection reached its lifetime of {self.settings.max_connection_s:g} "
                                      "s (websocket.max_connection_s)", "lifetime")
            await self.close(NORMAL, "connection limit reached", "lifetime")
        else:
            await self.close(NORMAL, "idle timeout (websocket.idle_timeout_s)", "idle")

    async def _limit_reached(self, message: str, why: str) -> None:
        """OpenAI's end of a spent connection: ``websocket_connection_limit_reached``; the turns it accepted
        run, then it closes normally. Clients such as Codex open a new connection and go on."""
        self.ending = True
        self.why = why
        error = GatewayError(400, message + "; open a new connection to continue", "invalid_request_error", None,
                             LIMIT_CODE)
        await self.send_text(gateway_error_event(error))

    # -- writing ---------------------------------------------------------------------------------
    async def send_text(self, text: str) -> None:
        if not (self.closed or self.left):
            await self._send({"type": "websocket.send", "text": text})

    async def close(self, code: int, reason: str, why: str = "") -> None:
        """Send the close frame, once; a stream playing then ends (its watcher reports a disconnect)."""
        if self.closed:
            return
        self.closed = True
        if why:
            self.why = why
        if not self.left:
            with contextlib.suppress(OSError, RuntimeError):  # gone meanwhile
                await self._send({"type": "websocket.close", "code": code, "reason": reason})


class Player:
    """An HTTP answer of the Responses surface played onto the socket: the ASGI ``send`` it is given.

    A stream already framed for the socket (``FRAMES_TYPE``: a Responses turn's, ``responses/events.py``) is
    written as it is; another's SSE frames become one message each (their ``data``); any other answer (an
    error before the first event) one ``error`` event with its status and rate-limit headers.
    """

    __slots__ = ("_body", "_connection", "_direct", "_events", "_headers", "_writer", "status")

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._direct = False  # the body is WebSocket frames (``FRAMES_TYPE``)
        self.status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._events: SSEEvents | None = None
        self._writer: FrameWriter | None = None
        self._body: list[bytes] = []

    async def send(self, message: Message) -> None:
        writer = self._writer
        if writer is not None:  # the hot path: a stream written to the connection directly
            body = message["body"]
            if self._direct:  # WebSocket frames already (the renderer's ``socket`` mode): written as they are
                if body and not writer.write_now(body):
                    await writer.write(body)
                return
            if not self._events.pending:  # type: ignore[union-attr]  # set with the writer
                # Whole SSE events (a compaction turn: responses/compaction_turn.py): framed in C.
                data = framed_events(body)
                if data is not None:
                    if not writer.write_now(data):
                        await writer.write(data)
                    return
                if not body:
                    return
        body = message.get("body", b"")
        if message["type"] == "http.response.start":
            self._start(message)
            return
        events = self._events
        if events is None:
            self._body.append(body)
            if not message.get("more_body", False):
                raw = b"".join(self._body)
                await self._connection.send_text(raw.decode() if self.status == 200 else
                                                 error_event(self.status, raw, self._headers))
            return
        payloads = events.feed(body)  # a large event's slices, or what follows them
        if not payloads:
            return
        if writer is not None:
            await writer.write(framed(payloads))
            return
        for data in payloads:
            await self._connection.send_text(data.decode())

    def _start(self, message: Message) -> None:
        self.status = message["status"]
        self._headers = list(message.get("headers") or ())
        if self.status != 200:
            return
        if (b"content-type", FRAMES_TYPE) in self._headers:  # asked for only when the connection has a writer
            self._direct = True
            self._writer = self._connection.writer
        elif (b"content-type", b"text/event-stream; charset=utf-8") in self._headers:
            self._events = SSEEvents()
            self._writer = self._connection.writer
