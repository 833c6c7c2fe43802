"""A lean ASGI streaming response for Server-Sent Events.

Starlette's StreamingResponse watches for client disconnects with an anyio task group and
cancel scopes per response, a large cost per stream (bench/README.md). This does the
same job with one plain asyncio task: it waits for ``http.disconnect`` and cancels the sending
task, whose cancellation unwinds the frame generator (closing the upstream connection and any
running tools) at once. uvicorn silently drops writes to a closed connection, so without the
watcher an abandoned stream would keep the upstream generating until it finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

from starlette.types import Receive, Scope, Send

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def event_frame(kind: str, data: bytes) -> bytes:
    """A named Server-Sent Event (``event:`` line + ``data:`` line), as the Responses API streams them.

    The one place such a frame is written (the chat completions' chunks are unnamed ``data:`` lines).
    """
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


class SSEResponse:
    """The SSE body of ``frames``: each is bytes (one write), or an iterator of bytes written one at a time
    (a frame too large to hold whole, made as it is written: responses/spliced.py)."""

    __slots__ = ("_frames", "_headers")

    def __init__(self, frames: AsyncIterator[bytes | Iterator[bytes]],
                 headers: list[tuple[bytes, bytes]] | None = None, media: bytes | None = None) -> None:
        self._frames = frames
        base = _HEADERS if media is None else [(b"content-type", media)]  # media: another body than SSE's
        self._headers = base + headers if headers else base

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        state = {"finished": False, "disconnected": False}

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    if not state["finished"]:
                        state["disconnected"] = True
                        task.cancel()
                    return

        watcher = asyncio.ensure_future(watch())
        frames = self._frames
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self._headers})
            async for frame in frames:
                if frame.__class__ is bytes:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    continue
                for piece in frame:  # each written before the next is made: uvicorn waits while the socket is full
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            state["finished"] = True
            watcher.cancel()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not state["disconnected"]:
                raise
            task.uncancel()  # the client left: a normal end for this request, not a cancellation
        finally:
            watcher.cancel()
            await frames.aclose()  # type: ignore[attr-defined]
