"""Upstreams that hold a request without ever finishing it, over raw TCP on 127.0.0.1.

``silent`` accepts the connection, reads the request and never sends a byte (a provider whose
process hangs: the head never arrives). ``drip`` sends a 200 head promising a large JSON body,
then one body byte every ``interval_s`` for ``for_s`` seconds and then nothing: each byte resets
a per-read timeout, so only a deadline over the whole call stops it. Both run on their own
thread and loop, so a gateway subprocess and an in-process router can call them alike.
"""

from __future__ import annotations

import asyncio
import threading


class StallingUpstream:
    wire = "openai"

    def __init__(self, mode: str, interval_s: float = 0.1, for_s: float = 30.0) -> None:
        if mode not in ("silent", "drip"):
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.interval_s = interval_s
        self.for_s = for_s
        self.requests = 0  # requests read so far (one per attempt)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StallingUpstream:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stalling upstream did not start")
        return self

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            self.requests += 1
            if self.mode == "drip":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{")
                loop = asyncio.get_running_loop()
                until = loop.time() + self.for_s
                while loop.time() < until:
                    await asyncio.sleep(self.interval_s)
                    writer.write(b" ")
                    await writer.drain()
            await reader.read()  # hold the connection until the client gives up
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def reset(self) -> None:
        self.requests = 0

    def stop(self) -> None:
        """Close the server and end every held connection's task before the loop stops (none left pending)."""
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            held = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
            self._loop.stop()

        if self._thread is None or not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(close()))
        self._thread.join(10)
