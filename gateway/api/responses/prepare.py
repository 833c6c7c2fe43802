"""What a Responses request runs on: a new conversation, one continued, or a paused loop resumed.

Everything that can refuse the request is refused here, before anything is claimed, run or
sent, so a refused request costs no tokens and leaves a paused loop pending. The three ways in:

* **new**: the instructions, then the input's messages (a compaction item opened into the summary it
  seals: ``compaction.py``); a plain ``LoopRequest``;
* **continued** (``previous_response_id`` naming a completed response): the stored transcript
  (``chain.parent_chain``) before the input's messages, stored later as what this response adds;
* **resuming a pause** (``previous_response_id`` naming a paused response, or a resent
  conversation ending in answers to calls the gateway holds): the answers go through the
  continuation claim exactly like ``POST /v1/continuations/{id}`` (at most once, approved tools
  ledgered), charged to the key that asked (``api/loop/resume.py``).

Each way watches its own loop (a resume in ``resume_paused``): the work is watched once. What
the run needs after this (the records store, their TTL) is taken from the surface's services
here, so running it (``run.ResponseRun``) reads nothing more from them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gateway.api.driver import deadline_of
from gateway.api.loop.planning import route_of
from gateway.api.loop.resume import Resumed, check_pending, resume_paused
from gateway.api.request.lifecycle import Work
from gateway.api.responses.calls import SOURCES, names_of
from gateway.api.responses.chain import Chain, check_quota, parent_chain, previous_not_found
from gateway.api.responses.compaction import expander
from gateway.api.responses.events import response_ids
from gateway.api.responses.hosted import plan_hosted
from gateway.api.responses.ids import response_id, server_label
from gateway.api.responses.items import Converted, to_messages
from gateway.api.responses.origin import responses_origin
from gateway.api.responses.reasoning import INCLUDE, Carrier, dropped_warning, restored
from gateway.api.responses.render import ResponseBuilder, ResponseRecorder
from gateway.api.responses.request import ResponsesRequest
from gateway.api.responses.run import ResponseRun
from gateway.api.services import ResponsesServices
from gateway.canonical import HostedTools, Message
from gateway.errors import GatewayError, bad_request, quoted
from gateway.loop.continuations import Continuations
from gateway.loop.engine import LoopRequest, run_loop, server_tool_names
from gateway.loop.pairing import pairing_problem
from gateway.routing.routes import RoutePlan
from gateway.store.continuations.base import Continuation, ContinuationNotFound
from gateway.store.responses.base import continuable
from gateway.tools.registry import ToolRegistry

_NO_APPROVALS: frozenset[str] = frozenset()
_ANSWERS = frozenset({"function_call_output", "custom_tool_call_output", "mcp_approval_response"})


async def prepare_response(request: ResponsesRequest, services: ResponsesServices, work: Work,
                           headless: bool, plan: RoutePlan | None = None) -> ResponseRun:
    """Resolve the request to a watched loop (new, continued, or a paused one resumed); raises GatewayError.

    ``work`` is admitted here, once it is known who is charged (a resume: the key that asked), and
    before anything is claimed or run. ``plan``: the route of ``request.model`` when the caller
    already looked it up.
    """
    key = work.key
    assert key is not None, "authenticated by the caller"
    tenant = key.tenant
    shared = services.loop  # the loop surfaces' services
    if plan is None:
        plan = route_of(shared.routes, key, request.model)
    server = server_tool_names(plan, shared.tools) if request.tools or request.hosted else ()
    if request.tools:
        _refuse_clashes(request, server)
    hosted, drops = plan_hosted(request, plan, bool(request.tools or server)) if request.hosted else (None, None)
    given = request.input
    # Only a compaction item is expanded: one message (a string input) needs no expander made.
    converted = to_messages(given, None if len(given) == 1 and given[0]["type"] == "message" else
                            expander(services, tenant), request.names)
    if request.store:
        pending = check_quota(services.records, services.quota_bytes, tenant)  # None: decided (the embedded store)
        if pending is not None:
            await pending
    deadline = deadline_of(shared.request_timeout_s)
    earlier: list[Message] = []
    chain: Chain | None = None
    previous_id = request.previous_response_id
    if previous_id is not None:
        record = await services.records.get(tenant, previous_id)
        if record is None:
            raise previous_not_found(previous_id)
        if record.get("continuation_id"):
            return await _answer_paused(request, services, work, headless, tenant, record, converted, deadline)
        if converted.orphan is not None or converted.approved:
            _refuse_stray_answers(converted)
        if not continuable(record):
            raise bad_request(f"response {quoted(previous_id)} did not complete; it cannot be continued",
                              "previous_response_id")
        earlier, chain = await parent_chain(services.records, tenant, previous_id, record)
    else:
        if converted.decisions and converted.orphan is None:
            paused = await _paused_match(shared.continuations, tenant, converted)
            if paused is not None:
                return await _resume(request, services, work, headless, paused, converted, deadline, None)
        if converted.orphan is not None or converted.approved:
            _refuse_stray_answers(converted)
    messages = _conversation(request, earlier, converted.messages)
    await work.admit(work.incoming.body_bytes, plan=plan, params=request.params)
    # The artifacts the gateway sealed into reasoning items, back on their turns (before the stored ones: a turn
    # that has some is not looked up).
    dropped = await restored(services.sealer, tenant, converted.sealed) if converted.sealed else 0
    if plan.needs_artifacts:
        await shared.continuations.reattach(tenant, messages)
    run = _new_run(request, services, work, headless, plan, messages, chain, deadline, hosted)
    if dropped:
        run.builder.notes = (dropped_warning(dropped),)
    if request.names is not None or drops or request.include:  # a plain request: nothing to describe
        _describe(run.builder, request, drops or {})
    return run


def _refuse_clashes(request: ResponsesRequest, server: tuple[str, ...]) -> None:
    """400 when a caller's tool (a namespace's included, by the name the model sees) has a server tool's name: the
    model could not tell which one it calls, and a result could reach the wrong one."""
    if not server:
        return
    names = set(server)
    for tool, param in zip(request.tools, request.tool_params, strict=False):
        name = tool["function"]["name"]
        if name in names:
            raise bad_request(f"tool {quoted(name)} has the name of a server tool of model {quoted(request.model)}; "
                              "rename it", param)


def _describe(builder: ResponseBuilder, request: ResponsesRequest, drops: dict[str, tuple[str, ...]]) -> None:
    """What the builder renders besides the loop's events: the caller's tool names, the hosted tools the targets
    drop, whether a web search's sources are asked for."""
    # A decided pause's request (``decided.py``) has no tools of its own: the paused request's are in its echo.
    builder.names = names_of(request.echo.get("tools")) if request.names is None and not request.tools else \
        request.names
    builder.hosted_drops = drops
    builder.sources = SOURCES in request.include


def _refuse_stray_answers(converted: Converted) -> None:
    """Answers no paused loop is waiting for: to a call not in the input, or approving a call nobody holds."""
    if converted.orphan is not None:
        raise bad_request("no function_call or mcp_approval_request in the input has this call id; to answer a "
                          "stored response, send 'previous_response_id'", converted.orphan)
    if converted.approved:
        raise bad_request("this mcp_approval_response approves a call that is not pending on this gateway (unknown, "
                          "expired or already answered)", "input")


def _conversation(request: ResponsesRequest, earlier: list[Message], given: list[Message]) -> list[Message]:
    """The loop's transcript: the instructions, the conversation continued, the input; refused when it is not one."""
    if not (earlier or given):
        raise bad_request("'input' is required (a string or a non-empty array of items)", "input")
    messages: list[Message] = [{"role": "system", "content": request.instructions}] if request.instructions else []
    messages.extend(earlier)
    messages.extend(given)
    problem = pairing_problem(messages)
    if problem is not None:
        raise bad_request(f"the input does not form a valid conversation: {problem}", "input")
    return messages


def _new_run(request: ResponsesRequest, services: ResponsesServices, work: Work, headless: bool, plan: RoutePlan,
             messages: list[Message], chain: Chain | None, deadline: float, hosted: HostedTools | None) -> ResponseRun:
    """The run of a new (or continued) conversation, its loop watched by ``work``."""
    key = work.key
    assert key is not None, "authenticated by the caller"
    # ``max_tool_calls`` caps server tool calls, not rounds (``loop/tool_round.triage``); only the extension's cap
    # lowers the route's rounds.
    iterations = plan.max_tool_iterations if request.max_tool_iterations is None \
        else min(plan.max_tool_iterations, request.max_tool_iterations)
    loop = LoopRequest(plan=plan, messages=messages, client_tools=request.tools, tool_choice=request.tool_choice,
                       params=request.params, max_iterations=iterations, headless=headless, tenant=key.tenant,
                       stream=request.stream, deadline=deadline, key_id=key.id, key_name=key.name,
                       allowed_tools=key.tools, stream_rescue=request.stream_rescue, hosted=hosted,
                       max_tool_calls=request.max_tool_calls)
    rid, item_base = response_ids()
    builder = ResponseBuilder(rid, request.model, request.echo, _labels(services.loop.tools), _NO_APPROVALS, None,
                              request.stream or request.background, request.stream and not request.background,
                              item_base)
    instructions_first = bool(request.instructions)
    loop.origin = responses_origin(rid, request, instructions_first)
    if request.include and INCLUDE in request.include:
        _carry(builder, loop, services, key.tenant)
    work.watch(loop)
    return ResponseRun(services.records, services.record_ttl_s, key.tenant, request, loop,
                       run_loop(loop, services.loop.deps), builder, instructions_first, chain)


def _carry(builder: ResponseBuilder, loop: LoopRequest, services: ResponsesServices, tenant: str) -> None:
    """``include: ["reasoning.encrypted_content"]``: each model call's artifacts sealed into its reasoning item."""
    builder.carrier = Carrier(services.sealer, tenant)
    loop.carry_artifacts = True


async def _answer_paused(request: ResponsesRequest, services: ResponsesServices, work: Work, headless: bool,
                         tenant: str,
                         record: dict[str, Any], converted: Converted, deadline: float) -> ResponseRun:
    """``previous_response_id`` names a paused response: only answers, and they resume its loop through the claim."""
    previous_id = str(request.previous_response_id)
    for index, item in enumerate(request.input):
        if item["type"] not in _ANSWERS:
            raise bad_request(f"response {quoted(previous_id)} waits for answers to its function_call / "
                              "custom_tool_call / mcp_approval_request items: send only function_call_output, "
                              "custom_tool_call_output and mcp_approval_response items", f"input[{index}]")
    try:
        stored = await services.loop.continuations.get(record["continuation_id"], tenant)
    except ContinuationNotFound:
        raise previous_not_found(previous_id) from None
    return await _resume(request, services, work, headless, stored, converted, deadline,
                         bool(record.get("instructions_first")))


async def _paused_match(continuations: Continuations, tenant: str, converted: Converted) -> Continuation | None:
    """A resent conversation ending in answers: the paused loop they answer, if it is this conversation's."""
    found = await continuations.find_by_tool_call(tenant, converted.decisions[0]["tool_call_id"])
    if found is None:
        return None
    try:
        stored = await continuations.get(found, tenant)
    except ContinuationNotFound:
        return None
    return stored if continuations.history_mismatch(stored, converted.messages) is None else None


async def _resume(request: ResponsesRequest, services: ResponsesServices, work: Work, headless: bool,
                  stored: Continuation,
                  converted: Converted, deadline: float, instructions_first: bool | None) -> ResponseRun:
    """Resume a paused loop with the input's answers (way B's checks, claim, ledger, audit and notifications).

    The key that asked is charged (``Work.charge_to``), admitted before the claim; ``resume_paused``
    watches the resumed loop. ``instructions_first``: whether the paused transcript starts with
    the instructions, when this request names it (``previous_response_id``; None for a resent
    conversation): this request's instructions then replace the stored ones.
    """
    conflict = f"the pending calls of this response were already answered (continuation {stored.id})"
    check_pending(stored, conflict)
    key = work.key
    assert key is not None, "authenticated by the caller"
    try:
        results, approved, answers = await services.loop.continuations.checked_decisions(
            stored, converted.decisions, key.id, key.name)
    except GatewayError as error:
        error.param = "input"
        raise
    resumed = await resume_paused(services.loop, work, stored, results=results, approved=approved, answers=answers,
                                  decisions=converted.decisions, stream=request.stream, headless=headless,
                                  deadline=deadline, conflict=conflict, stream_rescue=request.stream_rescue)
    first = bool(instructions_first)
    if instructions_first is not None:
        messages = resumed.loop.messages
        if instructions_first and messages:
            del messages[0]
        if request.instructions:
            messages.insert(0, {"role": "system", "content": request.instructions})
        first = bool(request.instructions)
    return resumed_run(services, request, resumed, approved, first, request.stream or request.background,
                       request.stream and not request.background)


def resumed_run(services: ResponsesServices, request: ResponsesRequest, resumed: Resumed, approved: list[str],
                instructions_first: bool, emit: bool, frames: bool) -> ResponseRun:
    """A claimed loop run as the response ``request`` describes (answers here, or a pause decided way B).

    Its stored result is this response (``ResponseRecorder``), and a pause of it is decided as a
    response continuing this one (``loop.origin``).
    """
    builder = ResponseBuilder(response_id(), request.model, request.echo, _labels(services.loop.tools),
                              frozenset(approved), emit=emit, frames=frames)
    _describe(builder, request, plan_hosted(request, resumed.plan, True, refuse=False)[1] if request.hosted else {})
    loop = resumed.loop
    if request.include and INCLUDE in request.include:
        _carry(builder, loop, services, loop.tenant)
    resumed.slot.recorder = ResponseRecorder(builder, request.echo)
    loop.origin = responses_origin(builder.id, request, instructions_first)
    return ResponseRun(services.records, services.record_ttl_s, loop.tenant, request, loop, resumed.events, builder,
                       instructions_first)


@functools.lru_cache(maxsize=16)
def _labels(tools: ToolRegistry) -> Callable[[str], str]:
    """The server-label function of a tool registry: made once per registry, not once per request."""

    def label(name: str) -> str:
        tool = tools.get(name)
        return server_label(tool.source.name) if tool is not None else "loopgate"

    return label

