"""A webhook receiver that records every delivery attempt, with paths that misbehave on purpose.

``/ok`` answers 200; ``/flaky`` answers 500 to the first attempt of each event id, then 200;
``/slow`` answers 200 after 50 ms; ``/hang`` never answers (the gateway's attempt timeout ends it).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.threaded import ThreadedApp


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int = 0
    ended_at: float | None = None  # when a hung attempt was given up by the sender

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


class WebhookReceiver(ThreadedApp):
    def __init__(self) -> None:
        super().__init__()
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._seen_flaky: set[str] = set()

    def build(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{name}", self._receive)
        return app

    def reset(self) -> None:
        with self._lock:
            self.deliveries.clear()
            self._seen_flaky.clear()

    def at(self, path: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.path == path]

    def wait_for(self, path: str, count: int, timeout: float = 15.0) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.at(path)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{path}: {len(self.at(path))} deliveries after {timeout}s, expected {count}")

    async def _receive(self, request: web.Request) -> web.Response:
        body = await request.read()
        delivery = Delivery(request.path, dict(request.headers), body, time.time())
        with self._lock:
            self.deliveries.append(delivery)
        name = request.match_info["name"]
        status = 200
        if name == "flaky":
            event_id = request.headers.get("X-Loopgate-Event-Id", "")
            with self._lock:
                first = event_id not in self._seen_flaky
                self._seen_flaky.add(event_id)
            status = 500 if first else 200
        elif name == "slow":
            await asyncio.sleep(0.05)
        elif name == "hang":
            try:
                await asyncio.sleep(3600)
            finally:
                delivery.ended_at = time.time()
        delivery.status = status
        return web.Response(status=status, text="nope" if status >= 400 else "ok")
