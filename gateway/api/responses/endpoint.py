"""``/v1/responses``: create (JSON or SSE), retrieve, delete, and list a response's input items.

The endpoints only authenticate, parse and render: what the run runs on is ``responses/prepare.py``,
the run itself ``responses/run.py``, the rendering ``responses/render.py``. Errors are the chat
completions' (``api/request/errors``): the same OpenAI shape, classes and statuses.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from starlette.requests import Request

from gateway.api.driver import Operation, read_body
from gateway.api.loop.planning import route_of
from gateway.api.request.errors import error_response
from gateway.api.request.lifecycle import ErrorRenderer, Work
from gateway.api.responses.background import background_operations, check_background, start_background
from gateway.api.responses.compaction import TRIGGER
from gateway.api.responses.compaction_turn import compaction_turn
from gateway.api.responses.events import usage_of
from gateway.api.responses.origin import with_continued_by
from gateway.api.responses.prepare import prepare_response
from gateway.api.responses.request import (
    MAX_ID_CHARS,
    parse_responses_request,
    path_response_id,
    response_not_found,
)
from gateway.api.responses.run import input_items
from gateway.api.services import ResponsesServices, Services, responses_services
from gateway.errors import bad_request
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.http.websocket_frames import FRAMES_TYPE
from gateway.store.continuations.base import ContinuationConflict, ContinuationNotFound

PATH = "/v1/responses"
ONE = PATH + "/{id}"
ITEMS = ONE + "/input_items"
DEFAULT_LIST_LIMIT = 20
MAX_LIST_LIMIT = 100


class ResponsesSurface:
    """``POST /v1/responses`` on the driver (``api/driver.py``): OpenAI's error shape; foreground JSON or
    stream, or a background run that keeps its admission (``Work.hold``)."""

    def __init__(self, path: str, operations: tuple[Operation[ResponsesServices], ...]) -> None:
        self.path = path
        self.errors: ErrorRenderer = error_response
        #: one response's GET and DELETE (a background run's, else the stored response's), its input items, cancel
        self.operations = operations

    def services(self, every: Services) -> ResponsesServices:
        return every.responses

    async def serve(self, work: Work, services: ResponsesServices) -> JSONResponse | SSEResponse:
        key = await work.authenticate()
        parsed = parse_responses_request(await read_body(work, services.loop.max_body_bytes))
        if parsed.input and parsed.input[-1]["type"] == TRIGGER:  # Codex's remote compaction (compaction_turn.py)
            compacting = route_of(services.loop.routes, key, parsed.model)
            work.allow(compacting)
            return await compaction_turn(parsed, services, work, compacting)
        if parsed.background:
            check_background(services, parsed.store)
            work.background = True  # admission also takes a slot under the per-key/per-tenant run caps
        plan = services.loop.routes.lookup(parsed.model)
        if plan is not None:  # an unknown model is prepare_response's 404
            work.allow(plan)
        # Resolves the request (a resume is charged to its asker), admits it and watches its loop before it starts.
        incoming = work.incoming
        run = await prepare_response(parsed, services, work, key.headless or parsed.headless or incoming.headless,
                                     plan)
        if parsed.background:  # the run goes on in a task of this process, holding its admission
            answer = await start_background(services, key.tenant, run, parsed.stream, work.hold())
            work.done(200)
            return answer
        if not parsed.stream:
            # ``complete`` calls back where ``open`` would return: a failure before any output
            # answers without the rate-limit headers, one after with them, as for a stream.
            await run.complete(work.show_limits)
            work.done(200)
            await work.settle(work.usage())  # the loop's usage, as its Finished event (and the Response) report
            return JSONResponse(run.response_json(), raw_headers=work.headers)
        await run.open()
        work.show_limits()

        async def on_close() -> None:
            work.done(200)
            await work.settle(usage_of(run.response))
        if incoming.socket:  # a WebSocket turn: its events framed for the connection, not as SSE text
            run.builder.to_socket()
            return SSEResponse(run.frames(_join, on_close), work.headers, FRAMES_TYPE)
        return SSEResponse(run.frames(_join, on_close), work.headers)


# A ``frames`` builder's batches are SSE frames already (bytes): the body joins them.
_join = b"".join


async def _record(request: Request, services: ResponsesServices, work: Work) -> tuple[str, str, dict[str, Any]]:
    key = await work.authenticate()
    response_id = path_response_id(request.path_params)
    record = await services.records.get(key.tenant, response_id)
    if record is None:
        raise response_not_found(response_id)
    return key.tenant, response_id, record


async def get_response(request: Request, services: ResponsesServices, work: Work) -> JSONResponse:
    """The stored Response; a paused one whose loop was resumed since names, in ``gateway.continued_by``,
    the answer that continued it (``{id, object}``: the response that answered it, through this API or
    decided way B (``responses.decided``); a chat completion only when a chat follow-up resumed it, or
    for a continuation paused before pauses recorded their origin; its body at
    ``GET /v1/continuations/{continuation_id}``)."""
    tenant, _, record = await _record(request, services, work)
    response = await with_continued_by(services.loop.continuations, tenant, record["response"],
                                       record.get("continuation_id"))
    return JSONResponse(orjson.dumps(response))


async def delete_response(request: Request, services: ResponsesServices, work: Work) -> JSONResponse:
    """Delete the record; a paused response's continuation is cancelled with it (nothing can answer it any more)."""
    tenant, response_id, record = await _record(request, services, work)
    if record.get("continuation_id"):
        # Already resumed, expired or being resumed: the record goes regardless.
        with contextlib.suppress(ContinuationNotFound, ContinuationConflict):
            await services.loop.continuations.cancel(record["continuation_id"], tenant)
    await services.records.delete(tenant, response_id)
    return JSONResponse(orjson.dumps({"id": response_id, "object": "response.deleted", "deleted": True}))


async def list_input_items(request: Request, services: ResponsesServices, work: Work) -> JSONResponse:
    """OpenAI's list object over the response's input items: ``limit``, ``order``, ``after``, ``before``."""
    query = request.query_params
    limit_text = query.get("limit")
    if limit_text is None:
        limit = DEFAULT_LIST_LIMIT
    elif not (limit_text.isdigit() and 1 <= int(limit_text[:4]) <= MAX_LIST_LIMIT and len(limit_text) <= 4):
        raise bad_request(f"'limit' must be an integer from 1 to {MAX_LIST_LIMIT}", "limit")
    else:
        limit = int(limit_text)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad_request("'order' must be 'asc' or 'desc'", "order")
    _, response_id, record = await _record(request, services, work)
    items = input_items(response_id, record["input"])
    if order == "desc":
        items = items[::-1]
    ids = [item.get("id") for item in items]
    for name in ("after", "before"):
        value = query.get(name)
        if value is None:
            continue
        if len(value) > MAX_ID_CHARS or value not in ids:
            raise bad_request(f"'{name}' names no input item of this response", name)
        position = ids.index(value)
        items, ids = (items[position + 1:], ids[position + 1:]) if name == "after" else (items[:position],
                                                                                         ids[:position])
    page = items[:limit]
    return JSONResponse(orjson.dumps({
        "object": "list", "data": page, "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit}))


RESPONSES = ResponsesSurface(PATH, (
    # GET and DELETE of one response: a background run's, else the stored response's (their fallbacks)
    *background_operations(get_response, delete_response),
    Operation("GET", ITEMS, list_input_items, responses_services),
))
