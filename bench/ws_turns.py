"""Turns over the Responses API's WebSocket mode, as ``bench.instructions --websocket`` sends them.

Each of ``concurrency`` workers opens one connection (``GET /v1/responses``, upgraded) and sends
``response.create`` turns on it one after another until ``count`` turns are sent in all; a turn
counts when its events end with ``response.completed``. Next to the same requests as HTTP
streams (``--responses --stream``), this is what one turn costs the gateway on a socket.

``--conversation N`` measures what the mode is for: conversations of N turns, each turn adding a
user message of ``TURN_CHARS`` characters (a tool's output, say), ``store: false`` as Codex sends
them. Over HTTP (:func:`send_conversations`) each turn resends the whole conversation so far, its
earlier answers included; over a socket (:func:`send_socket_conversations`) it sends only its new
message and the previous response's id, which the connection keeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
from websockets.asyncio.client import connect

#: the size of each turn's new user message in a conversation
TURN_CHARS = 2000
_END = ("response.completed", "response.failed", "response.incomplete", "error")


def _question(turn: int) -> str:
    return f"Turn {turn}: " + ("tool output line. " * (TURN_CHARS // 18))[:TURN_CHARS]


def _answer(response: dict[str, Any]) -> str:
    return "".join(part["text"] for item in response["output"] if item["type"] == "message"
                   for part in item["content"])


def turn_message(body: bytes) -> str:
    """The ``response.create`` message of a ``POST /v1/responses`` body (its ``stream`` implicit on a socket)."""
    fields = orjson.loads(body)
    fields.pop("stream", None)
    return orjson.dumps({"type": "response.create", **fields}).decode()


async def send_turns(base: str, count: int, concurrency: int, message: str, key: str | None = None,
                     per_socket: int = 0) -> int:
    """``count`` turns over ``concurrency`` workers, each on one connection (``per_socket`` > 0: a new connection
    after every ``per_socket`` turns, its handshake counted with them); how many completed."""
    url = base.replace("http://", "ws://", 1) + "/v1/responses"
    headers = {"authorization": f"Bearer {key}"} if key else {}
    ok = 0
    remaining = count

    async def worker() -> None:
        nonlocal ok, remaining
        while remaining > 0:
            async with connect(url, additional_headers=headers, max_size=None, compression=None) as socket:
                turns = 0
                while remaining > 0 and (not per_socket or turns < per_socket):
                    remaining -= 1
                    turns += 1
                    await socket.send(message)
                    while True:
                        event = orjson.loads(await socket.recv())
                        kind = event["type"]
                        if kind in _END:
                            ok += kind == "response.completed"
                            break

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok


async def send_socket_conversations(base: str, count: int, concurrency: int, model: str, depth: int,
                                    key: str | None = None) -> int:
    """``count`` turns in conversations of ``depth``, each turn its new message and ``previous_response_id``."""
    url = base.replace("http://", "ws://", 1) + "/v1/responses"
    headers = {"authorization": f"Bearer {key}"} if key else {}
    ok, remaining = 0, count

    async def worker() -> None:
        nonlocal ok, remaining
        async with connect(url, additional_headers=headers, max_size=None, compression=None) as socket:
            previous: str | None = None
            turn = 0
            while remaining > 0:
                remaining -= 1
                body: dict[str, Any] = {"type": "response.create", "model": model, "store": False,
                                        "input": _question(turn)}
                if previous is not None:
                    body["previous_response_id"] = previous
                await socket.send(orjson.dumps(body).decode())
                while True:
                    event = orjson.loads(await socket.recv())
                    if event["type"] in _END:
                        break
                completed = event["type"] == "response.completed"
                ok += completed
                turn = (turn + 1) % depth
                previous = event["response"]["id"] if completed and turn else None

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok


async def send_conversations(base: str, count: int, concurrency: int, model: str, depth: int,
                             key: str | None = None) -> int:
    """The same conversations over HTTP streams: each turn sends the whole conversation so far."""
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})}
    ok, remaining = 0, count

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal ok, remaining
        history: list[dict[str, Any]] = []
        turn = 0
        while remaining > 0:
            remaining -= 1
            history.append({"type": "message", "role": "user", "content": _question(turn)})
            body = {"model": model, "store": False, "stream": True, "input": history}
            async with session.post(f"{base}/v1/responses", data=orjson.dumps(body), headers=headers) as resp:
                raw = await resp.read()
            final = None
            for line in raw.split(b"\n"):
                if line.startswith(b"data: ") and b'"response.completed"' in line:
                    final = orjson.loads(line[6:])["response"]
            ok += final is not None
            turn = (turn + 1) % depth
            if final is None or not turn:
                history = []
            else:
                history.append({"type": "message", "role": "assistant", "content": _answer(final)})

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return ok
