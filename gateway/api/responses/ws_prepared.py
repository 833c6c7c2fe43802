"""``response.create`` with ``generate: false``: a response prepared, not generated (the WebSocket mode's warm-up).

OpenAI's WebSocket mode lets a client send its request ahead with ``generate: false`` ("prepare
request state without model output; the response ID can be used as ``previous_response_id`` on a
later turn"); Codex does so when it opens a session, then continues from that response with only
the new input. Here such a turn is a table surface of its own, driven like every turn
(``driver.drive``: the key, the request checked, plan and allow, the budget and rate limits,
recorded), and the same preparation as a response that generates (``prepare.prepare_response``:
the instructions, a conversation continued by ``previous_response_id``, the input) — but its loop
is never run: it ends at once, completed with no output and no usage (``ResponseRun.unrun``),
and its record holds the conversation as it stands (``transcript``, with no answer to add), kept
for the connection (``store: false``) or stored. A follow-up's model call then sees exactly that
conversation and its own input.

Answers to paused calls are refused here (they resume a loop, which must generate), and so is a
``previous_response_id`` naming a paused response.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.api.driver import Operation, read_body
from gateway.api.request.errors import error_response, to_gateway_error
from gateway.api.request.lifecycle import ErrorRenderer, Work
from gateway.api.responses.events import TERMINAL, usage_of
from gateway.api.responses.prepare import prepare_response
from gateway.api.responses.request import parse_responses_request
from gateway.api.responses.run import ResponseRun
from gateway.api.responses.spliced import frames_body
from gateway.api.services import ResponsesServices, Services
from gateway.errors import bad_request, quoted
from gateway.http.sse_response import SSEResponse
from gateway.http.websocket_frames import FRAMES_TYPE
from gateway.store.responses.base import TRANSCRIPT_HEAD

_ANSWERS = frozenset({"function_call_output", "mcp_approval_response"})


class PreparedSurface:
    """``generate: false`` turns, on the driver like the Responses surface (OpenAI's error shape; streamed)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: ErrorRenderer = error_response
        self.operations: tuple[Operation[Any], ...] = ()

    def services(self, every: Services) -> ResponsesServices:
        return every.responses

    async def serve(self, work: Work, services: ResponsesServices) -> SSEResponse:
        key = await work.authenticate()
        parsed = parse_responses_request(await read_body(work, services.loop.max_body_bytes))
        for index, item in enumerate(parsed.input):
            if item["type"] in _ANSWERS:
                raise bad_request("'generate': false prepares a conversation; answers to paused calls resume a loop, "
                                  "which generates: send them with 'generate' true", f"input[{index}]")
        previous = parsed.previous_response_id
        if previous is not None:
            record = await services.records.get(key.tenant, previous)
            if record is not None and record.get("continuation_id"):
                raise bad_request(f"response {quoted(previous)} waits for answers to its calls; answer them with "
                                  "'generate' true", "previous_response_id")
        plan = services.loop.routes.lookup(parsed.model)
        if plan is not None:  # an unknown model is prepare_response's 404
            work.allow(plan)
        incoming = work.incoming
        run = await prepare_response(parsed, services, work, key.headless or parsed.headless or incoming.headless,
                                     plan)
        work.show_limits()

        async def on_close() -> None:
            work.done(200)
            await work.settle(usage_of(run.response))
        if incoming.socket:  # its events framed for the connection, as a generating turn's (endpoint.py)
            run.builder.to_socket()
            return SSEResponse(prepared_frames(run, services, on_close), work.headers, FRAMES_TYPE)
        return SSEResponse(prepared_frames(run, services, on_close), work.headers)


async def prepared_frames(run: ResponseRun, services: ResponsesServices,
                          on_close: Callable[[], Awaitable[None]]) -> AsyncIterator[bytes]:
    """``response.created``, ``response.in_progress`` and ``response.completed`` (no output); the record written
    before the last, so a follow-up can continue from it at once (``response.failed`` if it cannot be written)."""
    builder = run.builder
    try:
        yield b"".join(builder.start())
        finished = run.unrun()
        batch = builder.feed(finished)
        try:
            if run.request.store:
                record = run.record(finished)
                # The conversation as it stands: nothing was generated, no answer to put back on reading.
                record["transcript"] = record.pop(TRANSCRIPT_HEAD)
                await services.records.put(run.tenant, run.id, record, services.record_ttl_s)
            else:
                await services.records.keep(run.tenant, run.id, run.record(finished, chained=False), None)
        except Exception as exc:  # not recorded: the client must not see "completed" for what it cannot continue
            builder.retract_terminal(batch)
            batch.extend(builder.fail(to_gateway_error(exc)))
        if batch and batch[-1] is TERMINAL:
            batch[-1] = builder.terminal_frame(run.response_json())
        body = frames_body(batch)
        yield body if isinstance(body, bytes) else b"".join(body)
    finally:
        with contextlib.suppress(Exception):
            await run.aclose()
        await on_close()
