"""The Open Responses compliance suite's WebSocket checks, re-created from their descriptions and the specification.

The suite runs these from its CLI only ("CLI WebSocket ..."): one connection to ``/v1/responses``,
``response.create`` messages (a ``CreateResponseBody`` with ``type``, no ``stream``), the same events
as the SSE stream back (each validated against the specification's schema for its type) and, for a
refused turn, the specification's ``WebSocketErrorEvent`` (``{type: "error", status, error: {code,
message}}``). ``store: false`` responses are remembered by the connection only: continuing one on a
new connection, or one never made, is ``previous_response_not_found``, and a failed continuation
forgets the response it referenced. The suite lists a seventh WebSocket check whose description
is not public beyond its name's first words; it is not re-created.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openresponses_types as spec
import orjson

from tests.e2e.open_responses import _issues, event_errors, resource_errors

WEBSOCKET_CHECKS = ("websocket-response", "websocket-sequential-responses", "websocket-continuation",
                    "websocket-store-false-reconnect-recovery", "websocket-missing-previous-response",
                    "websocket-failed-continuation-evicts-cache")
TERMINAL = ("response.completed", "response.failed", "response.incomplete")
TURN_TIMEOUT_S = 30
MISSING_ID = "resp_" + "0" * 48


class Turn:
    """One ``response.create`` answered: its events, or the ``error`` event that refused it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.error: dict[str, Any] | None = None

    @property
    def response(self) -> dict[str, Any] | None:
        terminal = [event["response"] for event in self.events if event.get("type") in TERMINAL]
        return terminal[-1] if terminal else None


async def turn(socket: aiohttp.ClientWebSocketResponse, body: dict[str, Any]) -> Turn:
    """Send one ``response.create``; read until its terminal event or an ``error`` event."""
    await socket.send_str(orjson.dumps({"type": "response.create", **body}).decode())
    answered = Turn()
    while True:
        message = await socket.receive(timeout=TURN_TIMEOUT_S)
        if message.type != aiohttp.WSMsgType.TEXT:
            answered.error = {"type": "error", "status": 0, "error": {"code": "closed",
                                                                     "message": f"socket {message.type.name}"}}
            return answered
        event = orjson.loads(message.data)
        if event.get("type") == "error" and "sequence_number" not in event:
            answered.error = event
            return answered
        answered.events.append(event)
        if event.get("type") in TERMINAL:
            return answered


def completed(answered: Turn, label: str) -> list[str]:
    """A turn that streamed valid events and completed with output, as the HTTP checks require."""
    if answered.error is not None:
        return [f"{label}: refused: {orjson.dumps(answered.error).decode()[:400]}"]
    errors = [f"{label}: {error}" for event in answered.events for error in event_errors(event)]
    response = answered.response
    if response is None:
        return [*errors, f"{label}: no terminal event"]
    errors += [f"{label}: {error}" for error in resource_errors(response)]
    if response.get("status") != "completed":
        errors.append(f'{label}: expected status "completed" but got "{response.get("status")}"')
    if not response.get("output"):
        errors.append(f"{label}: response has no output items")
    return errors


def not_found(answered: Turn, label: str) -> list[str]:
    """A turn refused with the specification's error event, code ``previous_response_not_found``."""
    if answered.error is None:
        return [f"{label}: expected an error event previous_response_not_found, got {len(answered.events)} events"]
    errors = [f"{label}: {issue}" for issue in _issues(spec.WebSocketErrorEvent, answered.error)]
    code = (answered.error.get("error") or {}).get("code")
    if code != "previous_response_not_found":
        errors.append(f"{label}: expected code previous_response_not_found, got {code!r}")
    return errors


def _ask(model: str, text: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "input": [{"type": "message", "role": "user", "content": text}], **fields}


Socket = aiohttp.ClientWebSocketResponse


async def _response(socket: Socket, model: str) -> list[str]:
    return completed(await turn(socket, _ask(model, "Say hello in exactly 3 words.")), "turn")


async def _sequential(socket: Socket, model: str) -> list[str]:
    errors, ids = [], []
    for number in range(1, 4):
        answered = await turn(socket, _ask(model, f"Say the number {number}."))
        errors += completed(answered, f"turn {number}")
        ids.append((answered.response or {}).get("id"))
    return errors + ([] if len(set(ids)) == 3 else [f"responses share ids: {ids}"])


async def _remembered(socket: Socket, model: str) -> tuple[str | None, list[str]]:
    """A ``store: false`` response to continue: its id, or the errors that prevent it."""
    first = await turn(socket, _ask(model, "Remember the code word papaya.", store=False))
    errors = completed(first, "first")
    return (None, errors) if errors else (str(first.response["id"]), [])  # type: ignore[index]


async def _continuation(socket: Socket, model: str) -> list[str]:
    first_id, errors = await _remembered(socket, model)
    if first_id is None:
        return errors
    return completed(await turn(socket, _ask(model, "What was the code word?", store=False,
                                             previous_response_id=first_id)), "continuation")


async def _missing(socket: Socket, model: str) -> list[str]:
    return not_found(await turn(socket, _ask(model, "Continue.", store=False, previous_response_id=MISSING_ID)),
                     "continuation")


async def _failed_continuation(socket: Socket, model: str) -> list[str]:
    """A continuation that fails (an input item the specification does not define) forgets the response it named."""
    first_id, errors = await _remembered(socket, model)
    if first_id is None:
        return errors
    failed = await turn(socket, {"model": model, "store": False, "previous_response_id": first_id,
                                 "input": [{"type": "not_an_item_type"}]})
    if failed.error is None and (failed.response or {}).get("status") != "failed":
        return ["the invalid continuation was not refused"]
    return not_found(await turn(socket, _ask(model, "What was the code word?", store=False,
                                             previous_response_id=first_id)), "after the failed continuation")


_ON_ONE_SOCKET = {"websocket-response": _response, "websocket-sequential-responses": _sequential,
                  "websocket-continuation": _continuation, "websocket-missing-previous-response": _missing,
                  "websocket-failed-continuation-evicts-cache": _failed_continuation}


async def _reconnect(session: aiohttp.ClientSession, url: str, model: str) -> list[str]:
    """A new connection does not know the ``store: false`` response the closed one made; a fresh turn works."""
    async with session.ws_connect(url) as socket:
        first_id, errors = await _remembered(socket, model)
    if first_id is None:
        return errors
    async with session.ws_connect(url) as socket:
        errors = not_found(await turn(socket, _ask(model, "What was the code word?", store=False,
                                                   previous_response_id=first_id)), "after reconnecting")
        return errors + completed(await turn(socket, _ask(model, "Start over: say hello.", store=False)),
                                  "recovery")


async def _check(check: str, url: str, key: str, model: str) -> list[str]:
    async with aiohttp.ClientSession(headers={"authorization": f"Bearer {key}"}) as session:
        if check == "websocket-store-false-reconnect-recovery":
            return await _reconnect(session, url, model)
        async with session.ws_connect(url) as socket:
            return await _ON_ONE_SOCKET[check](socket, model)


def run_websocket_check(check: str, base_url: str, key: str, model: str) -> list[str]:
    """The errors of one WebSocket check against ``base_url`` (``http://.../v1``); [] passes."""
    url = base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/responses"
    try:
        return asyncio.run(_check(check, url, key, model))
    except aiohttp.WSServerHandshakeError as exc:
        return [f"WebSocket upgrade refused: HTTP {exc.status} {exc.message}"]
    except (TimeoutError, aiohttp.ClientError) as exc:
        return [f"WebSocket failed: {type(exc).__name__}: {exc}"]
