"""The tool loop: one async generator of events, rendered either as one response or as a stream.

Each iteration is one model call through the router (so any iteration may be answered by
any target of the route), then, if the model asked for tools, one turn:

1. every call is classified: server tool, server tool needing approval, client tool, unknown;
2. server tools run concurrently (bounded), each with its timeout, their outcomes becoming
   results; unknown tools get an error result; in headless mode calls that would pause get
   a "denied (headless)" result;
3. if any call must wait for the client or a human, the loop pauses: the transcript, the
   turn's finished results and the loop state are stored as a continuation first, and only
   then is the pause reported;
4. otherwise the turn is appended through ``pairing.tool_turn`` and the loop goes on.

At ``max_tool_iterations`` tool rounds the next call is the finalize call: tool definitions
kept (Anthropic rejects tool blocks in a history without them), ``tool_choice: none`` and an
instruction to answer now, so the answer always ends in text.
"""

# Long by design: the tool loop is one engine (call, run tools, pair results, pause) that every
# surface shares; its steps are split out (context_step, pairing, continuations) where they stand
# alone.

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gateway.canonical import (
    Answering,
    Message,
    ModelRequest,
    NativeRequest,
    TextDelta,
    ToolCall,
    ToolDef,
    Usage,
    reasoning_deltas,
    text_of,
)
from gateway.context import ContextGuard
from gateway.loop.asking import TurnAsks, retrying
from gateway.loop.context_step import ContextStep
from gateway.loop.events import Finished, LoopEvent, LoopResult, Notice
from gateway.loop.pairing import ToolResult, tool_turn
from gateway.loop.pausing import PendingCall, gateway_extension, store_pause, waiting_calls
from gateway.loop.tool_runs import ExecuteHook, record, run_tools
from gateway.observability import metrics
from gateway.observability.tracing import NOOP, OUTGOING, Span
from gateway.routing.router import Answer, Router
from gateway.routing.routes import RoutePlan
from gateway.tools.interaction import InputRetry

__all__ = ["ExecuteHook", "PendingCall", "gateway_extension", "run_loop", "run_tools"]

FINALIZE_INSTRUCTION = (
    "The tool-call limit for this request has been reached. Do not call any more tools. "
    "Answer the user now with the information gathered so far."
)
# The finalize call the context guard forces names its own reason (the window, not a call limit).
CONTEXT_FINALIZE_INSTRUCTION = (
    "The conversation has reached the limit of the model's context window: no more tool calls or tool results "
    "fit in it. Do not call any more tools. Answer the user now with the information gathered so far."
)
ITERATION_SEPARATOR = "\n\n"
SKIPPED_RESULT = ("Skipped: the conversation is too long for the model's context window to take this tool's "
                  "result. Answer with what you have.")


class ToolRunner(Protocol):
    """What the engine needs from the tool registry: the lookup and one execution."""

    def get(self, name: str) -> Any: ...

    def definitions(self, names: Any) -> list[ToolDef]: ...

    def source_tools(self, source: str) -> tuple[str, ...]: ...


def server_tool_names(plan: RoutePlan, tools: ToolRunner) -> tuple[str, ...]:
    """The route's server tools now: its configured tools plus what its MCP servers list at the moment."""
    if not plan.tool_sources:
        return plan.server_tools
    names = list(plan.server_tools)
    for source in plan.tool_sources:
        names.extend(name for name in tools.source_tools(source) if name not in names)
    return tuple(names)


@dataclass(slots=True)
class LoopState:
    """Everything a paused loop needs to carry on exactly where it stopped."""

    iterations: int = 0
    tool_rounds: int = 0
    answered_by: list[str] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    tool_records: list[dict[str, Any]] = field(default_factory=list)
    headless_denials: list[dict[str, Any]] = field(default_factory=list)
    text_emitted: bool = False
    iteration_limit_reached: bool = False
    context: dict[str, int] = field(default_factory=dict)
    # The model that answered the last call: the response's ``model`` (kept across a pause).
    model: str = ""
    # One entry per model call that answered (summaries included): [target label, prompt, completion,
    # cached, reasoning tokens]. Billing prices each by its own target (gateway/usage/pricing.py).
    calls: list[list[Any]] = field(default_factory=list)
    # Seconds this HTTP request waited on model calls (each from its first attempt to its answer, a
    # stream to its end) and tool rounds: the gateway overhead is the rest (not kept across a pause).
    waited_s: float = 0.0
    # What MCP servers sampled during this request's tool calls (each its own model call, billed to the
    # key on its own usage row): {calls, prompt_tokens, completion_tokens, refused}; empty when none asked.
    sampling: dict[str, int] = field(default_factory=dict)

    def add_sampling(self, prompt_tokens: int, completion_tokens: int, refused: bool = False) -> None:
        totals = self.sampling or {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "refused": 0}
        if refused:
            totals["refused"] += 1
        else:
            totals["calls"] += 1
            totals["prompt_tokens"] += prompt_tokens
            totals["completion_tokens"] += completion_tokens
        self.sampling = totals

    def add_wait(self, seconds: float) -> None:
        self.waited_s += seconds

    def add_call(self, label: str, usage: Usage) -> None:
        self.usage.add(usage)
        self.calls.append([label, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
                           usage.reasoning_tokens])

    def to_dict(self) -> dict[str, Any]:
        return {
            "iterations": self.iterations, "tool_rounds": self.tool_rounds, "answered_by": self.answered_by,
            "attempts": self.attempts, "usage": [self.usage.prompt_tokens, self.usage.completion_tokens,
                                                 self.usage.cached_tokens, self.usage.reasoning_tokens,
                                                 self.usage.cache_creation_tokens],
            "tool_records": self.tool_records, "headless_denials": self.headless_denials,
            "text_emitted": self.text_emitted, "iteration_limit_reached": self.iteration_limit_reached,
            "context": self.context, "model": self.model, "sampling": self.sampling,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        state = cls(**{k: v for k, v in data.items() if k != "usage"})
        state.usage = Usage(*data.get("usage", (0, 0, 0, 0)))
        return state


@dataclass(slots=True)
class ResumeTurn:
    """The paused turn, completed by the resume: results so far plus the approved calls to run now."""

    assistant: Message
    results: dict[str, ToolResult]
    approved: list[ToolCall] = field(default_factory=list)
    continuation_id: str = ""
    # Approval calls whose approval_timeout_s passed: denied, and audited by the resume that applies it.
    timed_out: list[str] = field(default_factory=list)
    # What the client said after its tool results (a Messages caller's text beside them): after the turn.
    follow_up: list[Message] = field(default_factory=list)
    # Held calls that asked their next question once answered (``loop/held.py``): the turn pauses again.
    asked: list[PendingCall] = field(default_factory=list)
    # The decisions' answers to held calls' questions (call id -> {"action", "content"}; None: timed out).
    answers: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    # Stateless servers' calls this replica retries with their answers (no replica holds them any more).
    retries: dict[str, InputRetry] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class LoopRequest:
    plan: RoutePlan
    messages: list[Message]
    client_tools: list[ToolDef]
    tool_choice: Any
    params: dict[str, Any]
    max_iterations: int
    headless: bool
    tenant: str
    stream: bool
    deadline: float
    state: LoopState = field(default_factory=LoopState)
    resume: ResumeTurn | None = None
    # The asking key, kept with a pause so approvers see who asked (never the secret).
    key_id: str = ""
    key_name: str = ""
    # Server tools the asking key may use (None: all of the route's); the rest are never offered.
    allowed_tools: frozenset[str] | None = None
    # Called with the result just before it is yielded (paused or completed): usage metering
    # adds its fields to ``result.gateway`` there (gateway/usage/meter.py).
    on_finish: Callable[[LoopResult], None] | None = None
    # The request's span (tracing.NOOP when tracing is off): model calls and tools become its children.
    span: Span = NOOP
    # The caller's request in its own wire format, for targets of that format (canonical.NativeRequest).
    native: NativeRequest | None = None
    # The surface that renders this loop, as it needs to answer a decision on a pause in its own shape
    # (``POST /v1/continuations/{id}``): opaque here, stored with a pause as ``data["origin"]``; None: chat.
    origin: dict[str, Any] | None = None
    # ``gateway.stream_rescue`` of the request: True / False override the route's ``stream_rescue``.
    stream_rescue: bool | None = None


PauseHook = Callable[[LoopRequest, Message, dict[str, ToolResult], list[PendingCall]], Awaitable[str]]
# (tenant, call, reason, asking key id, asking key name)
# (tenant, call, reason, key id, key name, route) -> None: a headless denial, audited and notified
AuditHook = Callable[[str, ToolCall, str, str, str, str], Awaitable[None]]


@dataclass(slots=True)
class LoopDeps:
    router: Router
    tools: ToolRunner
    run_tool: ExecuteHook
    pause: PauseHook
    audit: AuditHook
    # Executes calls a human approved on resume; records each in the ledger so a retried resume never re-runs one.
    run_approved: Callable[[str, str], ExecuteHook] | None = None
    context: ContextGuard | None = None
    route_lookup: Callable[[str], RoutePlan | None] | None = None
    # A turn's elicitation handlers (``loop/asking.py``); None: tools that ask for input are declined.
    asking: Callable[[LoopRequest], TurnAsks] | None = None


def _is_forced(tool_choice: Any) -> bool:
    return tool_choice == "required" or isinstance(tool_choice, dict)


def headless_denial(name: str, reason: str) -> str:
    who = "a human's approval" if reason == "approval" else "the client to run it"
    return (f"Tool '{name}' was not run: it needs {who}, and this request runs headless with no one to "
            "answer. Continue without it.")


# Long by design: the loop is one async generator whose local state is the hot path; each step that
# stands alone is a function of loop/.
async def run_loop(request: LoopRequest, deps: LoopDeps) -> AsyncIterator[LoopEvent]:
    """Drive the loop to a final answer or a pause; ``request.messages`` is extended in place."""
    state = request.state
    plan = request.plan
    span = request.span
    resumed_from = ""  # the continuation this run resumes, named on its span events
    route_tools = server_tool_names(plan, deps.tools)
    if request.allowed_tools is not None:
        allowed = request.allowed_tools
        route_tools = tuple(name for name in route_tools if name in allowed)
    server_names = set(route_tools)
    client_names = {t.get("function", {}).get("name") for t in request.client_tools}
    if request.native is not None:  # the caller's tools as its own format declares them (typed ones too)
        client_names.update(t.get("name") for t in request.native.tools)
    tool_defs = deps.tools.definitions(route_tools) + request.client_tools
    transcript = request.messages
    context = (ContextStep(deps.context, deps.router, plan, request.params, request.deadline, deps.route_lookup,
                           state.add_call, span) if deps.context is not None else None)
    if context is not None:
        state.context = context.report
    cap = context.cap if context is not None else _unchanged
    force_finalize = False
    # Streams name the answering model on every chunk: the renderer follows these announcements.
    announced = state.model
    if request.stream and announced:
        yield Answering(announced)  # a resume: tool activity before the next call belongs to the paused turn
    if request.resume is not None:
        turn, request.resume = request.resume, None
        span.event("loopgate.resume", {"loopgate.continuation_id": turn.continuation_id})
        resumed_from = turn.continuation_id
        retried = [c for c in turn.assistant.get("tool_calls") or () if c["id"] in turn.retries]
        approved = [(call, deps.tools.get(call["function"]["name"])) for call in [*turn.approved, *retried]]
        for call, tool in approved:
            if tool is None:
                turn.results[call["id"]] = ToolResult("error", f"Tool '{call['function']['name']}' is no longer "
                                                      "available on this gateway.")
                record(state.tool_records, call, "error", 0.0, "unknown")
        execute = deps.run_approved(request.tenant, turn.continuation_id) if deps.run_approved else deps.run_tool
        if turn.retries:  # ledgered like approved calls: a retried resume replays the retry, never sends it twice
            execute = retrying(execute, turn.retries)
        runnable: list[tuple[ToolCall, Any]] = [(call, tool) for call, tool in approved if tool is not None]
        asks = deps.asking(request) if deps.asking is not None else None
        try:
            async for event in run_tools(runnable, execute, plan.tool_concurrency, turn.results,
                                         lambda c, s, e: record(state.tool_records, c, s, e), span,
                                         state.add_wait, asks):
                yield event
            asking = [*turn.asked, *waiting_calls(asks)]
            if asking:  # a held call asked again, or an approved call asked: paused once more
                yield Finished(await store_pause(request, deps, turn.assistant, turn.results, asking, asks))
                return
        finally:
            if asks is not None:
                asks.abandon()
        transcript.extend(await cap(tool_turn(turn.assistant, turn.results)))
        transcript.extend(turn.follow_up)
        state.tool_rounds += 1
    while True:
        finalize = force_finalize or state.tool_rounds >= request.max_iterations
        window_full = force_finalize  # the guard skipped tools for want of room
        if context is not None:
            overflow, notices = await context.before_call(transcript, tool_defs, first=state.iterations == 0
                                                          and state.tool_rounds == 0)
            for notice in notices:
                _context_event(span, notice, resumed_from)
                yield notice
            finalize, window_full = finalize or overflow, window_full or overflow
        instruction = CONTEXT_FINALIZE_INSTRUCTION if window_full else FINALIZE_INSTRUCTION
        messages = [*transcript, {"role": "user", "content": instruction}] if finalize else transcript
        if finalize:
            choice: Any = "none"
            state.iteration_limit_reached = True
        elif state.iterations and _is_forced(request.tool_choice):
            choice = "auto"
        else:
            choice = request.tool_choice
        # A native caller's choice goes on without loop tools: it may name a typed tool of its own (Anthropic's).
        model_request = ModelRequest(messages=messages, tools=tool_defs,
                                     tool_choice=choice if tool_defs or request.native is not None else None,
                                     params=request.params, native=request.native)
        attempts = state.attempts
        answer: Answer | None = None
        since = len(attempts)
        call_span = restore = None
        if span.recording:  # one attribute read when tracing is off
            call_span = span.model_call(plan.targets, model_request)
            outgoing = call_span.outgoing()  # None unless observability.propagate_to_providers
            restore = OUTGOING.set(outgoing) if outgoing is not None else None
        waiting = time.perf_counter()
        try:
            if request.stream:
                separate = state.text_emitted
                policy = plan.stream
                if request.stream_rescue is not None and request.stream_rescue is not policy.rescue:
                    policy = replace(policy, rescue=request.stream_rescue)
                async for item in deps.router.stream(plan.targets, model_request, attempts, plan.retries,
                                                     request.deadline, policy):
                    if isinstance(item, Answer):
                        answer = item
                        continue
                    head = item[0]
                    opens = isinstance(head, Answering)  # the first batch of the target that committed
                    if isinstance(head, Answering):
                        announced = head.model
                    if any(isinstance(delta, TextDelta) for delta in item):
                        if separate:
                            separate = False
                            at = 1 if opens else 0  # the separator is text of the new call: after its announcement
                            item = [*item[:at], TextDelta(ITERATION_SEPARATOR), *item[at:]]
                        state.text_emitted = True
                    yield item
            else:
                answer = await deps.router.complete(plan.targets, model_request, attempts, plan.retries,
                                                    request.deadline)
        except BaseException as exc:
            if call_span is not None:
                call_span.failed(exc, attempts[since:])
            raise
        finally:
            state.waited_s += time.perf_counter() - waiting
            if restore is not None:
                with contextlib.suppress(ValueError):  # closed from another context: nothing left to restore
                    OUTGOING.reset(restore)
        assert answer is not None
        if call_span is not None:
            call_span.answered(answer.target, answer.response, attempts[since:])
        if not request.stream:
            reasoning = reasoning_deltas(answer.response.message)  # per block, signatures included
            if reasoning:
                yield reasoning
            text = text_of(answer.response.message.get("content"))
            if text:
                if state.text_emitted:
                    yield TextDelta(ITERATION_SEPARATOR)
                state.text_emitted = True
                yield TextDelta(text)
        response = answer.response
        state.iterations += 1
        if answer.cut is not None:  # a rescued stream: its cut attempts produced (and billed) tokens too
            for label, usage in answer.cut:
                state.add_call(label, usage)
            span.event("loopgate.stream_rescue", {f"loopgate.{k}": v for k, v in (answer.rescued or {}).items()})
        state.add_call(answer.target.label, response.usage)
        state.answered_by.append(answer.target.label)
        if "reasoning_content" in response.message:  # provenance for reasoning_passback: auto
            response.message.setdefault("reasoning_origin", answer.target.provider.name)
        state.model = response.model or answer.target.model
        if request.stream and state.model != announced:
            announced = state.model  # a call that streamed nothing (tool calls only) still names its model
            yield Answering(announced)
        if context is not None:
            await context.observe(answer.target.label, answer.target.model, messages, tool_defs,
                            response.usage.prompt_tokens)
        calls = response.tool_calls
        if response.unfinished and not finalize and state.tool_rounds < request.max_iterations:
            # The provider paused its own turn (a long server tool of its own): call again with the turn as it
            # stands, which the provider continues; a round of the loop's cap, so it cannot go on for ever.
            transcript.append(response.message)
            state.tool_rounds += 1
            continue
        if finalize or not calls:
            metrics.LOOP_ITERATIONS.observe(state.iterations)
            finish = "stop" if calls else response.finish_reason
            result = LoopResult("completed", finish, state.usage, gateway_extension(state, "completed"),
                                model=state.model, stop_sequence=None if calls else response.stop_sequence)
            if request.on_finish is not None:
                request.on_finish(result)
            yield Finished(result)
            return

        assistant = response.message
        results: dict[str, ToolResult] = {}
        runnable = []
        pending: list[PendingCall] = []
        for call in calls:
            name = call["function"]["name"]
            tool = deps.tools.get(name) if name in server_names else None
            if tool is not None and tool.spec.approval != "required":
                runnable.append((call, tool))
                continue
            reason = "approval" if tool is not None else "client" if name in client_names else None
            if reason is None:
                available = ", ".join(sorted(server_names | client_names)) or "none"
                results[call["id"]] = ToolResult("error", f"Unknown tool '{name}'. Available tools: {available}.")
                record(state.tool_records, call, "error", 0.0, "unknown")
            elif request.headless:
                results[call["id"]] = ToolResult("denied", headless_denial(name, reason))
                state.headless_denials.append({"tool_call_id": call["id"], "name": name, "reason": reason})
                span.event("loopgate.denial", {"gen_ai.tool.name": name, "gen_ai.tool.call.id": call["id"],
                                               "loopgate.reason": reason})
                record(state.tool_records, call, "denied", 0.0, None if reason == "approval" else "client")
                await deps.audit(request.tenant, call, reason, request.key_id, request.key_name, request.plan.name)
            else:
                pending.append(PendingCall(call, reason, tool.spec.approval_timeout_s if tool is not None else None))

        if context is not None and (runnable or pending):
            room, notices = await context.before_tools(transcript, assistant, tool_defs, len(runnable) + len(pending))
            for notice in notices:
                _context_event(span, notice, resumed_from)
                yield notice
            if room < len(runnable) + len(pending):
                # No room for every result: the calls beyond it get a skipped result (server calls
                # first keep their place), and the next call is the finalize call.
                skipped = [call for call, _ in runnable[room:]] + [p.call for p in pending]
                runnable = runnable[:room]
                for call in skipped:
                    results[call["id"]] = ToolResult("skipped", SKIPPED_RESULT)
                    record(state.tool_records, call, "skipped", 0.0,
                            None if call["function"]["name"] in server_names else "client")
                yield context.skipped(len(skipped))
                pending, force_finalize = [], True

        asks = deps.asking(request) if deps.asking is not None else None
        try:
            async for event in run_tools(runnable, deps.run_tool, plan.tool_concurrency, results,
                                         lambda c, s, e: record(state.tool_records, c, s, e), span,
                                         state.add_wait, asks):
                yield event
            pending.extend(waiting_calls(asks))
            if pending:
                yield Finished(await store_pause(request, deps, assistant, results, pending, asks))
                return
        finally:
            if asks is not None:
                asks.abandon()
        transcript.extend(await cap(tool_turn(assistant, results)))
        state.tool_rounds += 1


def _context_event(span: Span, notice: Notice, continuation_id: str) -> None:
    """A context guard action on the request's span: its numbers, and the continuation a resume continues."""
    if not span.recording:
        return
    attributes: dict[str, Any] = {f"loopgate.{key}": value for key, value in notice.detail.items()
                                  if isinstance(value, int | float | str)}
    if continuation_id:
        attributes["loopgate.continuation_id"] = continuation_id
    span.event(f"loopgate.context.{notice.event}", attributes)


async def _unchanged(messages: list[Message]) -> list[Message]:
    return messages


