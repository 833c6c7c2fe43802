"""Driving a loop's events into one response or a stream: shared by every endpoint that runs the loop."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson

from gateway.api.chat.render import ChatCollector, ChunkEncoder, collect, completion_id, stream_frames
from gateway.api.request.errors import to_gateway_error
from gateway.api.request.lifecycle import Work
from gateway.errors import GatewayError
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.loop.engine import LoopEvent
from gateway.loop.events import until_answering
from gateway.loop.results import ResultSlot
from gateway.observability import metrics


async def respond(events: AsyncIterator[LoopEvent], stream: bool, include_usage: bool, route: str,
                  work: Work, slot: ResultSlot | None = None) -> JSONResponse | SSEResponse:
    """Render the loop's events as one response or as a stream (shared by chat and continuation resumes).

    ``route`` is the model the client asked for (``gateway.route``); the response's ``model`` names
    the model that answered (see ``render``). ``work.done`` runs once the request is over: for
    a stream, after its last byte (or its client's disconnect). ``slot``: a resume's, which gets the
    recorder of its stored result (the non-stream body, with this answer's id and ``created``).
    """
    response_id = completion_id()
    created = int(time.time())
    if slot is not None:
        slot.recorder = ChatCollector(response_id, route, created)
    if not stream:
        try:
            payload = await collect(events, response_id, route, created)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        work.done(200)
        return JSONResponse(orjson.dumps(payload), raw_headers=work.headers)
    # Pull the first events before answering, so a request that fails before any byte (every
    # target down, bad request upstream) gets a real HTTP status, not a 200 stream; and so the
    # first chunk already names the answering model (progress notices before the first call wait).
    first, model = await until_answering(events)
    encoder = ChunkEncoder(response_id, model or route, route, created)

    async def on_close() -> None:
        # Closing the engine here (also on client disconnect) cancels running tools and
        # releases the upstream connection at once rather than at garbage collection.
        await events.aclose()  # type: ignore[attr-defined]
        work.done(200)

    def on_error(exc: BaseException) -> GatewayError:
        return work.ended_with(to_gateway_error(exc))

    return SSEResponse(stream_frames(first, events, encoder, include_usage, on_error, on_close), work.headers)


def finished(path: str, label: str, status: int, started: float) -> None:
    """Count a request that has no :class:`Work`; ``label`` is a configured route, ``PROVIDER/*`` or ``unknown``."""
    metrics.REQUESTS.inc(path, label, str(status))
    metrics.LATENCY.observe(time.perf_counter() - started, path)


def encode_headers(headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    """Response headers as ASGI wants them (names lower-case; values are ours: numbers and seconds)."""
    if not headers:
        return []
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
