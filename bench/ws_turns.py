"""Turns over the Responses API's WebSocket mode, as ``bench.instructions --websocket`` sends them.

Each of ``concurrency`` workers opens one connection (``GET /v1/responses``, upgraded) and sends
``response.create`` turns on it one after another until ``count`` turns are sent in all; a turn
counts when its events end with ``response.completed``. Next to the same requests as HTTP
streams (``--responses --stream``), this is what one turn costs the gateway on a socket.
"""

from __future__ import annotations

import asyncio

import orjson
from websockets.asyncio.client import connect


def turn_message(body: bytes) -> str:
    """The ``response.create`` message of a ``POST /v1/responses`` body (its ``stream`` implicit on a socket)."""
    fields = orjson.loads(body)
    fields.pop("stream", None)
    return orjson.dumps({"type": "response.create", **fields}).decode()


async def send_turns(base: str, count: int, concurrency: int, message: str, key: str | None = None) -> int:
    """``count`` turns over ``concurrency`` connections; how many completed."""
    url = base.replace("http://", "ws://", 1) + "/v1/responses"
    headers = {"authorization": f"Bearer {key}"} if key else {}
    ok = 0
    remaining = count

    async def worker() -> None:
        nonlocal ok, remaining
        async with connect(url, additional_headers=headers, max_size=None, compression=None) as socket:
            while remaining > 0:
                remaining -= 1
                await socket.send(message)
                while True:
                    event = orjson.loads(await socket.recv())
                    kind = event["type"]
                    if kind in ("response.completed", "response.failed", "response.incomplete", "error"):
                        ok += kind == "response.completed"
                        break

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok
