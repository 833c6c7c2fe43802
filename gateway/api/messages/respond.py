"""Driving a loop's events into one Anthropic ``message`` or its event stream (the Messages surface and
the continuation resumes of pauses that began there)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from gateway.api.messages.errors import with_anthropic_headers
from gateway.api.messages.render import MessageBuilder, error_frame, message_id
from gateway.api.request.errors import to_gateway_error
from gateway.api.request.lifecycle import Work
from gateway.cancellation import EXITS
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.loop.events import LoopEvent, until_answering
from gateway.loop.results import ResultSlot


class MessageRecorder:
    """A resume's stored result on the Messages surface: the non-stream ``message`` of the same events and id."""

    __slots__ = ("builder",)

    def __init__(self, message_id: str, route: str, show_server_tools: bool) -> None:
        self.builder = MessageBuilder(route, route, False, show_server_tools)
        self.builder.id = message_id

    def feed(self, event: LoopEvent) -> None:
        self.builder.feed(event)

    def result(self) -> tuple[str, str, bytes]:
        return self.builder.id, "message", orjson.dumps(self.builder.message())


async def respond_message(events: AsyncIterator[LoopEvent], stream: bool, route: str, show_server_tools: bool,
                          work: Work, slot: ResultSlot | None = None) -> JSONResponse | SSEResponse:
    """``route`` is the model the caller named (``gateway.route``); ``message.model`` names the one that answered.

    ``work.done`` runs once the request is over: for a stream, after its last byte or the caller's
    disconnect. The headers are the work's, with their Anthropic twins (``request-id``, limits).
    """
    headers = with_anthropic_headers(work.headers)
    answer_id = message_id()
    if slot is not None:  # a resume: the recorder of its stored result, with this answer's id
        slot.recorder = MessageRecorder(answer_id, route, show_server_tools)
    if not stream:
        builder = MessageBuilder(route, route, False, show_server_tools)
        builder.id = answer_id
        try:
            async for event in events:
                builder.feed(event)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        work.done(200)
        return JSONResponse(orjson.dumps(builder.message()), raw_headers=headers)
    # The first events are pulled before answering: a request that fails before any output gets a
    # real status (and the SDK its exception class), and ``message_start`` names the answering model.
    first, model = await until_answering(events)
    builder = MessageBuilder(model or route, route, True, show_server_tools)
    builder.id = answer_id

    async def frames() -> AsyncIterator[bytes]:
        try:
            head = [builder.start()]
            for event in first:
                head.extend(builder.feed(event))
            yield b"".join(head)
            try:
                async for event in events:
                    out = builder.feed(event)
                    if out:
                        yield b"".join(out)
            except BaseException as exc:  # after the commit point: an error event (a native panic too)
                if isinstance(exc, EXITS):  # a close or a cancellation is no failure
                    raise
                yield error_frame(work.ended_with(to_gateway_error(exc)))
        finally:
            await events.aclose()  # type: ignore[attr-defined]
            work.done(200)

    return SSEResponse(frames(), headers)
