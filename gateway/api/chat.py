"""``POST /v1/chat/completions``: validate, plan, run the loop, render it."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import orjson

from gateway import metrics
from gateway.api.auth import authenticate
from gateway.api.body import read_json
from gateway.api.incoming import Incoming
from gateway.api.json_response import JSONResponse
from gateway.api.render import ChunkEncoder, collect, completion_id, stream_frames
from gateway.api.request import parse_chat_request
from gateway.api.runtime import Runtime
from gateway.api.sse_response import SSEResponse
from gateway.errors import GatewayError, bad_request, from_upstream
from gateway.loop.artifacts import reattach
from gateway.loop.continuations import may_resume_way_a
from gateway.loop.engine import LoopEvent, LoopRequest, run_loop, server_tool_names
from gateway.routing.router import AllTargetsFailed, StreamInterrupted
from gateway.store.base import ContinuationConflict, ContinuationNotFound, StoreUnavailable

log = logging.getLogger("loopgate.api")
PATH = "/v1/chat/completions"


def to_gateway_error(exc: BaseException) -> GatewayError:
    """Every exception a request can end with, as the error the client should see."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, AllTargetsFailed):
        return from_upstream(exc.last, exc.target)
    if isinstance(exc, StreamInterrupted):
        return GatewayError(502, f"the upstream stream from {exc.target} failed after it started "
                            f"({exc.error.error_class.value}): {exc.error.message}", "upstream_error",
                            code="stream_interrupted")
    if isinstance(exc, StoreUnavailable):
        return GatewayError(503, "the continuation store is unavailable; nothing was paused or resumed, retry later",
                            "service_unavailable_error", code="store_unavailable")
    if isinstance(exc, ContinuationNotFound):
        return GatewayError(404, str(exc), "invalid_request_error", code="continuation_not_found")
    if isinstance(exc, ContinuationConflict):
        return GatewayError(409, str(exc), "invalid_request_error", code="continuation_conflict")
    log.error("unexpected error while serving a request", exc_info=exc)
    return GatewayError(500, "internal gateway error (logged); nothing about it is your request's fault",
                        "server_error", code="internal_error")


def error_response(error: GatewayError) -> JSONResponse:
    return JSONResponse(error.body(), error.status, error.headers)


async def respond(events: AsyncIterator[LoopEvent], stream: bool, include_usage: bool, model: str, path: str,
                  started: float) -> JSONResponse | SSEResponse:
    """Render the loop's events as one response or as a stream (shared by chat and continuation resumes)."""
    response_id = completion_id()
    if not stream:
        try:
            payload = await collect(events, response_id, model)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
        _done(path, model, 200, started)
        return JSONResponse(orjson.dumps(payload))
    # Pull the first event before answering, so a request that fails before any byte
    # (every target down, bad request upstream) gets a real HTTP status, not a 200 stream.
    try:
        first = await anext(events, None)
    except BaseException:
        await events.aclose()  # type: ignore[attr-defined]
        raise
    encoder = ChunkEncoder(response_id, model)

    async def on_close() -> None:
        # Closing the engine here (also on client disconnect) cancels running tools and
        # releases the upstream connection at once rather than at garbage collection.
        await events.aclose()  # type: ignore[attr-defined]
        _done(path, model, 200, started)

    return SSEResponse(stream_frames(first, events, encoder, include_usage, to_gateway_error, on_close))


async def chat_completions(request: Incoming, runtime: Runtime) -> JSONResponse | SSEResponse:
    started = time.perf_counter()
    model = "-"
    try:
        key = authenticate(request.authorization, runtime.keys)
        body = await read_json(request, runtime.config.server.max_body_bytes)
        chat = parse_chat_request(body)
        model = chat.model
        plan = runtime.routes.lookup(chat.model)
        if plan is None:
            raise GatewayError(404, f"The model '{chat.model}' does not exist. Known models: "
                               f"{', '.join(runtime.routes.names()) or 'none'}.", "invalid_request_error",
                               "model", "model_not_found")
        if chat.tools:
            server = set(server_tool_names(plan, runtime.tools))
            for index, tool in enumerate(chat.tools):
                if tool["function"]["name"] in server:
                    raise bad_request(f"client tool '{tool['function']['name']}' has the name of a server tool "
                                      f"of model '{chat.model}'; rename it", f"tools[{index}]")
        headless = key.headless or chat.headless or request.headless
        deadline = time.monotonic() + runtime.config.routing.request_timeout_s
        continuations = runtime.continuations
        way_a = (await continuations.way_a(key.tenant, chat.messages)
                 if may_resume_way_a(chat.messages) else None)  # no coroutine for a plain request
        if way_a is not None:
            # Resume way A: continue from the stored transcript (with its hidden server-side exchanges).
            stored, results = way_a
            plan = runtime.routes.lookup(stored.model) or plan
            claimed = await runtime.store.claim_continuation(stored.id, key.tenant, continuations.lease_s)
            loop_request = continuations.resumed_request(claimed, plan, results, [], chat.stream, deadline,
                                                         key.tenant, headless)
            events = continuations.run_resumed(claimed, loop_request, runtime.deps)
        else:
            if plan.needs_artifacts:
                await reattach(runtime.store, key.tenant, chat.messages)
            max_iterations = plan.max_tool_iterations
            if chat.max_tool_iterations is not None:
                max_iterations = min(max_iterations, chat.max_tool_iterations)
            loop_request = LoopRequest(
                plan=plan, messages=list(chat.messages), client_tools=chat.tools, tool_choice=chat.tool_choice,
                params=chat.params, max_iterations=max_iterations, headless=headless, tenant=key.tenant,
                stream=chat.stream, deadline=deadline,
            )
            events = run_loop(loop_request, runtime.deps)
        return await respond(events, chat.stream, chat.include_usage, chat.model, PATH, started)
    except Exception as exc:
        error = to_gateway_error(exc)
        _done(PATH, model, error.status, started)
        return error_response(error)


def _done(path: str, model: str, status: int, started: float) -> None:
    metrics.REQUESTS.inc(path, model, str(status))
    metrics.LATENCY.observe(time.perf_counter() - started, path)
