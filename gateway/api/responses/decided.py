"""A pause that began on ``/v1/responses``, decided way B: answered, stored and chained as a Response.

``POST /v1/continuations/{id}`` (an approver key, the approvals inbox, or the asker) resumes the
loop through the same claim as every resume (``api.loop.resume``); this renders it as the Responses
API would have: a ``response`` object (Responses SSE events with ``stream: true``) whose
``previous_response_id`` is the paused response and whose input is the decisions as
``function_call_output`` / ``mcp_approval_response`` items. It runs as a :class:`ResponseRun`, so
it is recorded exactly like a response answering the paused one (unless the paused request said
``store: false``): ``GET /v1/responses/{id}``, ``input_items`` and ``previous_response_id`` work
on it, the paused response's ``gateway.continued_by`` names it, and it is the continuation's
stored result. A pause of the resumed loop is decided, in turn, as a response continuing this one.
"""

from __future__ import annotations

from typing import Any

from gateway.api.loop.resume import Resumed
from gateway.api.request.lifecycle import Work
from gateway.api.responses.events import usage_of
from gateway.api.responses.origin import decision_items
from gateway.api.responses.prepare import resumed_run
from gateway.api.responses.reasoning import INCLUDE
from gateway.api.responses.request import ResponsesRequest
from gateway.api.services import ResponsesServices
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse


def decided_request(origin: dict[str, Any], decisions: list[dict[str, Any]], stream: bool) -> ResponsesRequest:
    """The Responses request a decision stands for: the paused request's fields, answering the paused response."""
    paused_id = str(origin["response_id"])
    echo = {**(origin.get("echo") or {}), "previous_response_id": paused_id, "background": False}
    metadata = echo.get("metadata")
    return ResponsesRequest(
        model=str(origin.get("model") or ""), input=decision_items(decisions), instructions=echo.get("instructions"),
        # The loop's tools, choice and parameters come from the continuation: these only describe.
        tools=[], tool_choice=echo.get("tool_choice"), params={}, stream=stream, store=origin.get("store") is not False,
        background=False, previous_response_id=paused_id, max_tool_calls=None, max_tool_iterations=None,
        headless=False, metadata=metadata if isinstance(metadata, dict) else {}, echo=echo,
        include=tuple(str(i) for i in origin.get("include") or () if i == INCLUDE))


async def respond_decided(services: ResponsesServices, work: Work, origin: dict[str, Any], resumed: Resumed,
                          decisions: list[dict[str, Any]], approved: list[str],
                          stream: bool) -> JSONResponse | SSEResponse:
    """Run the claimed loop to a Response (JSON, or its event stream), recorded before its terminal event."""
    request = decided_request(origin, decisions, stream)
    request.model = request.model or resumed.plan.name
    run = resumed_run(services, request, resumed, approved, bool(origin.get("instructions_first")), stream, stream)
    if not stream:
        await run.complete()
        work.done(200)
        await work.settle(usage_of(run.response))
        return JSONResponse(run.response_json(), raw_headers=work.headers)
    await run.open()

    async def on_close() -> None:
        work.done(200)
        await work.settle(usage_of(run.response))

    return SSEResponse(run.frames(b"".join, on_close), work.headers)
