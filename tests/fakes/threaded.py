"""An aiohttp app served on 127.0.0.1 from its own thread and event loop.

The gateway under test is a separate process, so the fakes it talks to must keep answering while
a test's own code blocks on the SDK: each fake runs on a loop of its own.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod

from aiohttp import web


class ThreadedApp(ABC):
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @abstractmethod
    def build(self) -> web.Application:
        """The fake's routes."""

    def start(self) -> ThreadedApp:
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        if not ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        # handler_cancellation: a client that goes away cancels its handler, as a real server's would.
        self._runner = web.AppRunner(self.build(), access_log=None, handler_cancellation=True)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        self._loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
