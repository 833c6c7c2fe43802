"""The WebSocket mode of ``/v1/responses``: many ``response.create`` turns over one connection (OpenAI's).

**The upgrade** (``GET /v1/responses`` with ``Upgrade: websocket``) is a request of its own,
checked before the connection is accepted: the key (``Authorization: Bearer``, as the HTTP
surface), its role, a budget this process already saw spent, and the connection caps
(``websocket.max_connections``, ``max_connections_per_key``). A refusal is the HTTP answer of the
handshake (401, 403, 429 in OpenAI's error shape), never an accepted socket. It is recorded (access
record, span) as ``GET /v1/responses`` with status 101, and not metered.

**Each turn is an HTTP POST of the Responses surface**, run by the one driver: the message is
handed to ``driver.drive`` as the body of a request with the connection's headers
(``Incoming.for_message``), so a turn goes through exactly the lifecycle of ``POST
/v1/responses`` with ``stream: true`` — authenticate (a key revoked since the upgrade is refused,
and the connection closed), parse, plan and allow, new / continued / resumed, budget and
admission (rate limits and a concurrency slot per turn), watch, render, settle — and its answer
(the stream, or an error) is played onto the socket: each event a message holding the ``data`` its SSE
frame would carry (the renderer frames them for the socket itself: ``responses/events.py``, ``socket``
mode), an error answer an ``error`` event. Failover, the tool loop and pauses are the
surface's own; ``previous_response_id`` also reaches the connection's own ``store: false``
responses (``ws_records.ConnectionRecords``). The connection itself, its turns in order and its
bounds: ``ws_connection.py``; its messages: ``ws_messages.py``.
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from gateway.api.driver import Mounted
from gateway.api.request.lifecycle import Work
from gateway.api.responses.ws_connection import POLICY, Connection
from gateway.config.websocket_section import WebSocketConfig
from gateway.errors import GatewayError
from gateway.http.incoming import Incoming
from gateway.http.request_id import REQUEST_ID_HEADER, request_id
from gateway.observability.metrics import WEBSOCKET_CONNECTIONS

PATH = "/v1/responses"  # the Responses surface's path (the upgrade is recorded under it)


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
        self.open += 1  # counted before anything is awaited: the caps hold for upgrades arriving together
        WEBSOCKET_CONNECTIONS.set(self.open)
        self.per_key[key_id] = self.per_key.get(key_id, 0) + 1
        try:
            work.done(101)
            await send({"type": "websocket.accept", "headers": headers})
            await Connection(self.mounted, self.settings, incoming, receive, send).run()
        finally:
            self.open -= 1
            WEBSOCKET_CONNECTIONS.set(self.open)
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
