"""``POST /v1/chat/completions``: validate, plan, run the loop, render it."""

from __future__ import annotations

import logging
import time

from gateway.api.chat.request import parse_chat_request
from gateway.api.chat.respond import respond
from gateway.api.planning import refuse_name_clashes, route_of
from gateway.api.resume import resume_paused
from gateway.api.runtime import Runtime
from gateway.http.body import read_json
from gateway.http.incoming import Incoming
from gateway.http.json_response import JSONResponse
from gateway.http.sse_response import SSEResponse
from gateway.loop.artifacts import reattach
from gateway.loop.continuations import may_resume_way_a
from gateway.loop.engine import LoopRequest, run_loop

log = logging.getLogger("loopgate.api")
PATH = "/v1/chat/completions"


async def chat_completions(request: Incoming, runtime: Runtime) -> JSONResponse | SSEResponse:
    work = runtime.lifecycle.begin("POST", PATH, request)
    try:
        key = work.authenticate()
        body = await read_json(request, runtime.config.server.max_body_bytes)
        chat = parse_chat_request(body)
        plan = route_of(runtime, key, chat.model)
        work.allow(plan)
        if chat.tools:
            refuse_name_clashes(runtime, plan, chat.tools, chat.model, "client tool")
        headless = key.headless or chat.headless or request.headless
        deadline = time.monotonic() + runtime.config.routing.request_timeout_s
        continuations = runtime.continuations
        way_a = (await continuations.way_a(key.tenant, chat.messages)
                 if may_resume_way_a(chat.messages) else None)  # no coroutine for a plain request
        if way_a is not None:
            # Resume way A: continue from the stored transcript (with its hidden server-side exchanges).
            stored, results = way_a
            resumed = await resume_paused(runtime, work, stored, results=results, approved=[], decisions=None,
                                          stream=chat.stream, headless=headless, deadline=deadline,
                                          conflict=f"continuation {stored.id} was already resumed")
            loop_request, events = resumed.loop, resumed.events
        else:
            await work.admit(request.body_bytes)
            if plan.needs_artifacts:
                await reattach(runtime.store, key.tenant, chat.messages)
            max_iterations = plan.max_tool_iterations
            if chat.max_tool_iterations is not None:
                max_iterations = min(max_iterations, chat.max_tool_iterations)
            loop_request = LoopRequest(
                plan=plan, messages=list(chat.messages), client_tools=chat.tools, tool_choice=chat.tool_choice,
                params=chat.params, max_iterations=max_iterations, headless=headless, tenant=key.tenant,
                stream=chat.stream, deadline=deadline, key_id=key.id, key_name=key.name,
                allowed_tools=key.tools,
            )
            work.watch(loop_request)
            events = run_loop(loop_request, runtime.deps)
        work.show_limits()
        if chat.stream:
            return await respond(work.settled_at_end(events), True, chat.include_usage, chat.model, work)
        response = await respond(events, False, chat.include_usage, chat.model, work)
        await work.settle(loop_request.state.usage)  # the loop's usage, as its Finished event reports
        return response
    except Exception as exc:
        return work.render_error(await work.failed(exc))
