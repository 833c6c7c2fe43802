"""``/v1/continuations/{id}``: inspect (GET, optionally waiting for the end), resume with decisions (POST,
way B), cancel (DELETE).

A decision is answered in the shape of the surface the pause began on: a chat completion, an
Anthropic ``message`` (``/v1/messages``), or a Responses ``response`` that continues the paused
one (``/v1/responses``, see ``responses.decided``)."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.approvals.every_tenant import decider_in
from gateway.api.chat.respond import respond
from gateway.api.driver import Operation, RoutedSurface, deadline_of, read_body
from gateway.api.loop.resume import check_pending, resume_paused
from gateway.api.messages.respond import respond_message
from gateway.api.request.errors import to_gateway_error
from gateway.api.request.lifecycle import Work
from gateway.api.responses.origin import began_on_responses
from gateway.api.services import ContinuationServices, continuation_services
from gateway.errors import bad_request
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.loop.approvals import continuation_view
from gateway.observability import metrics
from gateway.store.continuations.base import Continuation, ContinuationNotFound

PATH = "/v1/continuations"
ONE = PATH + "/{id}"


# Ids the gateway issues are far shorter; a longer one cannot exist, and is not echoed back whole.
MAX_CONTINUATION_ID = 100


def _continuation_id(request: Request) -> str:
    continuation_id: str = request.path_params["id"]
    if len(continuation_id) > MAX_CONTINUATION_ID:
        raise ContinuationNotFound(continuation_id[:MAX_CONTINUATION_ID] + "…")
    return continuation_id


# ``?wait=N``: at most this many seconds; the store is read again after WAIT_POLL_S, doubling to WAIT_POLL_MAX_S.
MAX_WAIT_S = 60.0
WAIT_POLL_S = 0.05
WAIT_POLL_MAX_S = 0.5
# Requests of this process waiting at once; past it ``wait`` answers at once (each waiter reads the store).
MAX_WAITERS = 1000
_UNFINISHED = ("pending", "claimed")
_waiting = 0


def _wait_seconds(request: Request) -> float:
    raw = request.query_params.get("wait")
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw) if len(raw) <= 20 else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_WAIT_S):
        raise bad_request(f"'wait' must be a number of seconds from 0 to {MAX_WAIT_S:g}", "wait")
    return value


def result_view(continuation: Continuation) -> dict[str, Any]:
    """The continuation as ``GET`` shows it; a resumed one with its ``result`` (the body its decider received)."""
    view = continuation_view(continuation)
    if continuation.result is not None:
        stored = orjson.loads(continuation.result)
        view["result"] = stored["body"]
        view["result_id"] = stored["id"]
        view["result_object"] = stored["object"]
    return view


async def get_continuation(request: Request, services: ContinuationServices, work: Work) -> JSONResponse:
    """Any key of the tenant (the asker's included) may read it; ``?wait=N`` polls the shared store (so it
    sees a resume on any replica) until it is no longer pending or claimed, or N seconds passed."""
    key = await decider_in(request, work)
    wait = _wait_seconds(request)
    continuation_id = _continuation_id(request)
    continuations = services.loop.continuations
    continuation = await continuations.get(continuation_id, key.tenant)
    global _waiting
    if wait and continuation.status in _UNFINISHED and _waiting < MAX_WAITERS:
        _waiting += 1
        try:
            deadline = time.monotonic() + wait
            delay = WAIT_POLL_S
            while continuation.status in _UNFINISHED and (left := deadline - time.monotonic()) > 0:
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, WAIT_POLL_MAX_S)
                continuation = await continuations.get(continuation_id, key.tenant)
        finally:
            _waiting -= 1
    return JSONResponse(orjson.dumps(result_view(continuation)))


async def delete_continuation(request: Request, services: ContinuationServices, work: Work) -> JSONResponse:
    key = await decider_in(request, work)
    await services.loop.continuations.cancel(_continuation_id(request), key.tenant)
    metrics.CONTINUATIONS.inc("cancelled")
    work.span.event("loopgate.cancel", {"loopgate.continuation_id": request.path_params["id"][:100]})
    return JSONResponse(orjson.dumps({"id": request.path_params["id"], "object": "continuation.deleted",
                                      "deleted": True}))


def _stream_options(body: Any) -> tuple[bool, bool]:
    """``stream`` and ``stream_options.include_usage`` of a decisions body."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    stream = body.get("stream")
    if stream is None:
        stream = False
    elif not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    return stream, bool((options or {}).get("include_usage"))


async def resume_continuation(request: Request, services: ContinuationServices,
                              work: Work) -> JSONResponse | SSEResponse:
    """Way B: the caller decides (any key of the tenant, approvers included, or an admin key naming the
    tenant); the asker is charged. Its answer (a renderer of the resumed loop) ends the work."""
    try:
        return await _resume(request, services, work)
    except Exception as exc:  # counted, then answered by the driver like any failure
        error = to_gateway_error(exc)
        if error.status == 409:
            metrics.CONTINUATIONS.inc("conflict")
        elif error.code == "continuation_not_found":
            metrics.CONTINUATIONS.inc("not_found")  # unknown, expired or cancelled
        raise


async def _resume(request: Request, services: ContinuationServices, work: Work) -> JSONResponse | SSEResponse:
    decider = await decider_in(request, work, deciding=True)
    loop = services.loop
    body = await read_body(work, loop.max_body_bytes)
    stream, include_usage = _stream_options(body)
    stored = await loop.continuations.get(_continuation_id(request), decider.tenant)
    conflict = f"continuation {stored.id} was already resumed"
    check_pending(stored, conflict)
    results, approved, answers = await loop.continuations.checked_decisions(
        stored, body.get("decisions"), decider.id, decider.name)
    span = work.span
    if span.recording:
        for call_id, result in results.items():
            if result.status == "denied":
                span.event("loopgate.denial", {"loopgate.continuation_id": stored.id,
                                               "gen_ai.tool.call.id": call_id})
    resumed = await resume_paused(loop, work, stored, results=results, approved=approved, answers=answers,
                                  decisions=body["decisions"], stream=stream, headless=work.incoming.headless,
                                  deadline=deadline_of(loop.request_timeout_s), conflict=conflict)
    events = resumed.events
    work.show_limits()
    origin = began_on_responses(stored.data)
    if origin is not None:  # a Response continuing the paused one, stored and chained like one
        return await services.decided_response(work, origin, resumed, body["decisions"], approved, stream)
    if _began_on_messages(stored.data):  # answered in the shape the pause was asked in
        return await respond_message(work.settled_at_end(events), stream, stored.model, False, work, resumed.slot)
    return await respond(work.settled_at_end(events), stream, include_usage, stored.model, work, resumed.slot)


def _began_on_messages(data: dict[str, Any]) -> bool:
    """The paused loop was asked for on ``/v1/messages`` (its request in Anthropic's own format)."""
    native = data.get("native")
    return isinstance(native, dict) and native.get("wire_format") == "anthropic"


#: one continuation: read, resume with decisions, cancel (recorded under ``/v1/continuations``, never an id)
CONTINUATIONS = RoutedSurface((
    Operation("GET", ONE, get_continuation, continuation_services, record_as=PATH),
    Operation("POST", ONE, resume_continuation, continuation_services, metered=True, ends_work=True, record_as=PATH),
    Operation("DELETE", ONE, delete_continuation, continuation_services, record_as=PATH),
))
