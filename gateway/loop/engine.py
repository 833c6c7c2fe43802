"""The tool loop: one async generator of events, rendered either as one response or as a stream.

A run is a sequence of named steps; :func:`run_loop` calls them in order and passes their events on:

* the resume prologue (``prologue.resumed_turn``), when the request resumes a paused round: that
  round's approved calls run first, as the round of a new request would;
* per iteration, the model call: the context guard fits the transcript (``ContextStep.before_call``),
  :meth:`LoopRun.next_request` makes the call (the finalize call once the rounds are spent), the router
  answers it (any target of the route may answer any iteration), :meth:`LoopRun.answered` accounts
  for it;
* finalize (:meth:`LoopRun.finish`) when the answer asks for no tools;
* else the tool round: its calls sorted (``tool_round.triage``), headless denials audited, room made for
  the results (``ContextStep.before_tools``, :meth:`LoopRun.made_room`), the server tools run
  (``tool_runs.run_tools``), then the pause (:meth:`LoopRun.pause`: stored first, reported after) when a
  call waits for the client, a human or a user's answer, or the round paired into the transcript
  (``pairing.tool_turn``).

The steps are plain functions and methods: none yields. A step that yielded would be an async
generator of its own, at about 7,000 instructions a use (3,500 of them asyncio's hook for async
generators) and 750 per event passed through it, so the model call's stream and the round's tools
are iterated in ``run_loop`` itself (bench/README.md, "run_loop as named steps").

At ``max_tool_iterations`` tool rounds the next call is the finalize call: tool definitions
kept (Anthropic rejects tool blocks in a history without them), ``tool_choice: none`` and an
instruction to answer now, so the answer always ends in text. A Responses ``max_tool_calls`` caps the
server tool calls instead (``tool_round.triage``): a call past it is not run and gets a "limit reached"
result, and a round with nothing but such calls makes the next call the finalize call.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any

from gateway.canonical import (
    Answering,
    Message,
    ModelRequest,
    ModelResponse,
    StreamDelta,
    TextDelta,
    ToolCall,
    mark_origin,
    reasoning_deltas,
    text_of,
)
from gateway.loop.asking import TurnAsks
from gateway.loop.context_step import ContextStep
from gateway.loop.events import Finished, LoopEvent, LoopResult, Notice, TurnArtifacts
from gateway.loop.pairing import ToolResult, tool_turn
from gateway.loop.pausing import PendingCall, gateway_extension, store_pause, waiting_calls
from gateway.loop.prologue import resumed_turn
from gateway.loop.state import LoopDeps, LoopRequest, LoopState, ResumeTurn, ToolRunner
from gateway.loop.tool_round import Turn, audit_denials, triage
from gateway.loop.tool_runs import ExecuteHook, record, run_tools
from gateway.observability import metrics
from gateway.observability.tracing import OUTGOING, Span
from gateway.routing.rescue import StreamPolicy
from gateway.routing.router import Answer
from gateway.routing.routes import RoutePlan

# Importers of these names from here predate ``state.py`` and ``tool_round.py``: they keep working.
__all__ = ["ExecuteHook", "LoopDeps", "LoopEvent", "LoopRequest", "LoopRun", "LoopState", "PendingCall",
           "ResumeTurn", "ToolRunner", "gateway_extension", "run_loop", "run_tools", "server_tool_names"]

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


def server_tool_names(plan: RoutePlan, tools: ToolRunner) -> tuple[str, ...]:
    """The route's server tools now: its configured tools plus what its MCP servers list at the moment."""
    if not plan.tool_sources:
        return plan.server_tools
    names = list(plan.server_tools)
    for source in plan.tool_sources:
        names.extend(name for name in tools.source_tools(source) if name not in names)
    return tuple(names)


async def run_loop(request: LoopRequest, deps: LoopDeps) -> AsyncIterator[LoopEvent]:
    """Drive the loop to a final answer or a pause; ``request.messages`` is extended in place."""
    run = LoopRun(request, deps)
    state, plan, context = request.state, request.plan, run.context
    if request.stream and run.announced:
        yield Answering(run.announced)  # a resume: tool activity before the next call belongs to the paused turn
    turn = resumed_turn(run, request.resume) if request.resume is not None else None
    while True:
        if turn is not None:  # a round's server tools run; a call left waiting pauses the loop
            asks = deps.asking(request) if deps.asking is not None else None
            try:
                async for event in run_tools(turn.runnable, turn.execute, plan.tool_concurrency, turn.results,
                                             run.record_tool_run, request.span, state.add_wait, asks):
                    yield event
                turn.pending.extend(waiting_calls(asks))
                if turn.pending:
                    yield Finished(await run.pause(turn, asks))  # stored first, reported after
                    return
            finally:
                if asks is not None:
                    asks.abandon()
            run.transcript.extend(await context.cap(tool_turn(turn.assistant, turn.results)))
            run.transcript.extend(turn.follow_up)
            state.tool_rounds += 1
        window_full, notices = await context.before_call(run.transcript, run.tool_defs,
                                                         first=state.iterations == 0 and state.tool_rounds == 0)
        for notice in notices:
            yield run.noticed(notice)
        model_request = run.next_request(window_full)  # the model call
        call_span = run.open_call_span(model_request) if request.span.recording else None
        answer = None
        waiting = time.perf_counter()
        try:
            if request.stream:
                silent = True  # no text from this call yet
                async for item in deps.router.stream(plan.targets, model_request, state.attempts, plan.retries,
                                                     request.deadline, run.stream_policy):
                    if isinstance(item, Answer):
                        answer = item
                        continue
                    head = item[0]
                    if isinstance(head, Answering):  # the first batch of the target that committed
                        run.announced = head.model
                    if silent and any(isinstance(delta, TextDelta) for delta in item):
                        item, silent = run.first_text(item), False
                    yield item
            else:
                answer = await deps.router.complete(plan.targets, model_request, state.attempts, plan.retries,
                                                    request.deadline)
        except BaseException as exc:
            run.call_failed(call_span, exc)
            raise
        finally:
            state.waited_s += time.perf_counter() - waiting
            if call_span is not None:
                run.close_call_span()
        assert answer is not None
        for event in run.answered(answer, call_span):
            yield event
        response = answer.response
        await context.observe(answer.target.label, answer.target.model, run.messages, run.tool_defs,
                              response.usage.prompt_tokens)
        if response.unfinished and run.provider_paused(response):
            continue
        calls = response.tool_calls
        if run.finalize or not calls:
            yield Finished(run.finish(response, calls))  # finalize
            return
        turn = triage(run, response.message, calls, deps.run_tool)  # the tool round
        if turn.denied:
            await audit_denials(run, turn)
        if results_due := len(turn.runnable) + len(turn.pending):  # the guard's room for their results
            room, notices = await context.before_tools(run.transcript, turn.assistant, run.tool_defs, results_due)
            if notices or room < results_due:
                for event in run.made_room(turn, room, notices):
                    yield event


class LoopRun:
    """One request's run of the loop: what it resolves once (the route's tools, the context step) and the
    steps of an iteration, which share it as attributes rather than a dozen arguments each."""

    __slots__ = ("announced", "calls_spent", "context", "deps", "finalize", "force_finalize", "messages", "request",
                 "restore",
                 "resumed_from", "route_tools", "since", "state", "stream_policy", "tool_defs", "transcript")
    # Set by the step that first needs them: the messages of the last call (``next_request``); on a traced
    # request, where the call's attempts begin and the trace context to restore (``open_call_span``).
    messages: list[Message]
    since: int
    restore: Any

    def __init__(self, request: LoopRequest, deps: LoopDeps) -> None:
        self.request = request
        self.deps = deps
        self.state = state = request.state
        route_tools = server_tool_names(request.plan, deps.tools)
        if request.allowed_tools is not None:
            allowed = request.allowed_tools
            route_tools = tuple(name for name in route_tools if name in allowed)
        self.route_tools = route_tools
        # A route without server tools (plain proxy traffic) sends the caller's own list: nothing to build.
        client_tools = request.client_tools
        self.tool_defs = deps.tools.definitions(route_tools) + client_tools if route_tools else client_tools
        self.transcript = request.messages
        self.context = ContextStep(deps.context, deps.router, request.plan, request.params, request.deadline,
                                   deps.route_lookup, state.add_call, request.span)
        state.context = self.context.report
        self.stream_policy = _stream_policy(request) if request.stream else request.plan.stream
        # Streams name the answering model on every chunk: the renderer follows these announcements.
        self.announced = state.model
        self.resumed_from = ""  # the continuation this run resumes, named on its span events
        self.force_finalize = False
        # A round had only calls past ``max_tool_calls`` (``tool_round.triage``): the next call is the finalize call.
        self.calls_spent = False

    def record_tool_run(self, call: ToolCall, status: str, elapsed_ms: float) -> None:
        """A server call's end in the state's records (``tool_runs.run_tools`` reports each)."""
        record(self.state.tool_records, call, status, elapsed_ms)

    def pause(self, turn: Turn, asks: TurnAsks | None) -> Awaitable[LoopResult]:
        """The pause: the continuation stored first, and only then the calls waiting for answers handed on."""
        return store_pause(self.request, self.deps, turn.assistant, turn.results, turn.pending, asks)

    def next_request(self, window_full: bool) -> ModelRequest:
        """The next call: the finalize call once the rounds are spent or the window is full."""
        request, state = self.request, self.state
        window_full = window_full or self.force_finalize  # the guard skipped tools for want of room
        finalize = self.finalize = window_full or self.calls_spent or state.tool_rounds >= request.max_iterations
        messages = self.transcript
        if finalize:
            instruction = CONTEXT_FINALIZE_INSTRUCTION if window_full else FINALIZE_INSTRUCTION
            messages = [*messages, {"role": "user", "content": instruction}]
            choice: Any = "none"
            state.iteration_limit_reached = True
        elif state.iterations and _is_forced(request.tool_choice):
            choice = "auto"
        else:
            choice = request.tool_choice
        self.messages = messages
        # A native caller's choice goes on without loop tools: it may name a typed tool of its own (Anthropic's).
        tools = self.tool_defs
        return ModelRequest(messages=messages, tools=tools,
                            tool_choice=choice if tools or request.native is not None else None,
                            params=request.params, native=request.native, hosted=request.hosted)

    def open_call_span(self, model_request: ModelRequest) -> Span:
        """The call's span (traced requests only), its trace context sent upstream when propagation is on."""
        self.since = len(self.state.attempts)
        call_span = self.request.span.model_call(self.request.plan.targets, model_request)
        outgoing = call_span.outgoing()  # None unless observability.propagate_to_providers
        self.restore = OUTGOING.set(outgoing) if outgoing is not None else None
        return call_span

    def call_failed(self, call_span: Span | None, exc: BaseException) -> None:
        if call_span is not None:
            call_span.failed(exc, self.state.attempts[self.since:])

    def close_call_span(self) -> None:
        if self.restore is not None:
            with contextlib.suppress(ValueError):  # closed from another context: nothing left to restore
                OUTGOING.reset(self.restore)

    def answered(self, answer: Answer, call_span: Span | None) -> list[LoopEvent]:
        """The call's answer accounted for (usage, a rescued stream's cut attempts too, target and model); what
        it adds to the events: a whole answer's reasoning and text, a stream's announcement of its model."""
        state, response = self.state, answer.response
        message = response.message
        if call_span is not None:
            call_span.answered(answer.target, response, state.attempts[self.since:])
        events: list[LoopEvent] = []
        stream = self.request.stream
        carry = self.request.carry_artifacts
        if not stream:
            reasoning = reasoning_deltas(message)  # per block, signatures included
            if reasoning:
                events.append(reasoning)
            if carry:  # sealed into the reasoning item just opened (its provider is marked below, before it is read)
                events.append(TurnArtifacts(message, answer.target.provider.name))
            if response.hosted_calls:  # hosted tools the target ran (a mapped web search): before their answer
                events.append(list(response.hosted_calls))
            text = text_of(message.get("content"))
            if text:
                if state.text_emitted:
                    events.append(TextDelta(ITERATION_SEPARATOR))
                state.text_emitted = True
                events.append(TextDelta(text))
        state.iterations += 1
        if answer.cut is not None:  # a rescued stream: its cut attempts produced (and billed) tokens too
            for label, usage in answer.cut:
                state.add_call(label, usage)
            self.request.span.event("loopgate.stream_rescue",
                                    {f"loopgate.{k}": v for k, v in (answer.rescued or {}).items()})
        state.add_call(answer.target.label, response.usage)
        state.answered_by.append(answer.target.label)
        mark_origin(message, answer.target.provider.name)  # reasoning_passback: auto; whose openai_output
        state.model = response.model or answer.target.model
        if stream and carry:
            events.append(TurnArtifacts(message, answer.target.provider.name))
        if stream and state.model != self.announced:
            self.announced = state.model  # a call that streamed nothing (tool calls only) still names its model
            events.append(Answering(state.model))
        return events

    def first_text(self, batch: list[StreamDelta]) -> list[StreamDelta]:
        """A streamed call's first text: after an earlier call's, the separator goes first (after the batch's
        announcement of its model, as it is text of the new call)."""
        if not self.state.text_emitted:
            self.state.text_emitted = True
            return batch
        at = 1 if isinstance(batch[0], Answering) else 0
        return [*batch[:at], TextDelta(ITERATION_SEPARATOR), *batch[at:]]

    def provider_paused(self, response: ModelResponse) -> bool:
        """The provider paused its own turn (a long server tool of its own): the next call continues the turn
        as it stands. A round of the loop's cap, so it cannot go on for ever."""
        if self.finalize or self.state.tool_rounds >= self.request.max_iterations:
            return False
        self.transcript.append(response.message)
        self.state.tool_rounds += 1
        return True

    def finish(self, response: ModelResponse, calls: list[ToolCall]) -> LoopResult:
        """The run's result: the answer's finish reason (``stop`` for calls the finalize call made anyway)."""
        state = self.state
        metrics.LOOP_ITERATIONS.observe(state.iterations)
        result = LoopResult("completed", "stop" if calls else response.finish_reason, state.usage,
                            gateway_extension(state, "completed"), model=state.model,
                            stop_sequence=None if calls else response.stop_sequence)
        if self.request.on_finish is not None:
            self.request.on_finish(result)
        return result

    def made_room(self, turn: Turn, room: int, notices: list[Notice]) -> list[LoopEvent]:
        """The context guard's answer before a round: with no room for every result, the calls beyond it get
        a skipped result (server calls first keep their place) and the next call is the finalize call."""
        events: list[LoopEvent] = [self.noticed(notice) for notice in notices]
        if room >= len(turn.runnable) + len(turn.pending):
            return events
        skipped = [call for call, _ in turn.runnable[room:]] + [p.call for p in turn.pending]
        turn.runnable = turn.runnable[:room]
        for call in skipped:
            turn.results[call["id"]] = ToolResult("skipped", SKIPPED_RESULT)
            record(self.state.tool_records, call, "skipped", 0.0,
                   None if call["function"]["name"] in self.route_tools else "client")
        events.append(self.context.skipped(len(skipped)))
        turn.pending, self.force_finalize = [], True
        return events

    def noticed(self, notice: Notice) -> Notice:
        """A context guard action, an event on the request's span (the continuation a resume continues)."""
        span = self.request.span
        if span.recording:
            attributes: dict[str, Any] = {f"loopgate.{key}": value for key, value in notice.detail.items()
                                          if isinstance(value, int | float | str)}
            if self.resumed_from:
                attributes["loopgate.continuation_id"] = self.resumed_from
            span.event(f"loopgate.context.{notice.event}", attributes)
        return notice


def _stream_policy(request: LoopRequest) -> StreamPolicy:
    """The route's stream policy, with the request's ``gateway.stream_rescue`` when it overrides the route's."""
    policy = request.plan.stream
    rescue = request.stream_rescue
    return policy if rescue is None or rescue is policy.rescue else replace(policy, rescue=rescue)


def _is_forced(tool_choice: Any) -> bool:
    return tool_choice == "required" or isinstance(tool_choice, dict)

