"""The tool loop: one async generator of events, rendered either as one response or as a stream.

A run is a sequence of named steps (:func:`run_loop` reads as the list of them):

* the resume prologue (``prologue.py``), when the request resumes a paused round;
* per iteration: the context guard before the call (:meth:`LoopRun.fit_window`), one model call through
  the router (:meth:`LoopRun.call_model`; any iteration may be answered by any target of the route);
* then, if the model asked for tools, one tool round (``tool_round.py``): the calls sorted, room made
  for their results (:meth:`LoopRun.make_room`), the server tools run, and a pause or the next call;
* finalize (:meth:`LoopRun.finish`): the answer, with the ``gateway`` object that reports the run.

At ``max_tool_iterations`` tool rounds the next call is the finalize call: tool definitions
kept (Anthropic rejects tool blocks in a history without them), ``tool_choice: none`` and an
instruction to answer now, so the answer always ends in text.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from gateway.canonical import (
    Answering,
    Message,
    ModelRequest,
    ModelResponse,
    TextDelta,
    reasoning_deltas,
    text_of,
)
from gateway.loop.context_step import ContextStep
from gateway.loop.events import Finished, LoopEvent, LoopResult, Notice
from gateway.loop.pairing import ToolResult
from gateway.loop.pausing import PendingCall, gateway_extension
from gateway.loop.prologue import resume_paused_turn
from gateway.loop.state import LoopDeps, LoopRequest, LoopState, ResumeTurn, ToolRunner
from gateway.loop.tool_round import Turn, run_turn, triage
from gateway.loop.tool_runs import ExecuteHook, record, run_tools
from gateway.observability import metrics
from gateway.observability.tracing import OUTGOING
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
    if request.stream and run.announced:
        yield Answering(run.announced)  # a resume: tool activity before the next call belongs to the paused turn
    if request.resume is not None:
        paused, request.resume = request.resume, None
        async for event in resume_paused_turn(run, paused):
            yield event
        if run.paused:
            return
    while True:
        if run.context is not None:
            for notice in await run.fit_window():
                yield notice
        async for event in run.call_model():
            yield event
        response = run.response
        if run.provider_paused(response):
            continue
        calls = response.tool_calls
        if run.finalize or not calls:
            yield Finished(run.finish(response))
            return
        turn = await triage(run, response.message, calls)
        if run.context is not None and (turn.runnable or turn.pending):
            for event in await run.make_room(turn):
                yield event
        async for event in run_turn(run, turn, deps.run_tool):
            yield event
        if run.paused:
            return


class LoopRun:
    """One request's run of the loop: what it resolves once (the route's tools, the context step) and the
    steps of an iteration, which share it as attributes rather than a dozen arguments each."""

    __slots__ = ("announced", "cap", "context", "deps", "finalize", "force_finalize", "messages", "paused", "plan",
                 "request", "response", "resumed_from", "route_tools", "span", "state", "tool_defs", "transcript",
                 "window_full")
    response: ModelResponse  # the last call's, once it answered

    def __init__(self, request: LoopRequest, deps: LoopDeps) -> None:
        self.request, self.deps, self.plan, self.span = request, deps, request.plan, request.span
        self.state = state = request.state
        route_tools = server_tool_names(request.plan, deps.tools)
        if request.allowed_tools is not None:
            allowed = request.allowed_tools
            route_tools = tuple(name for name in route_tools if name in allowed)
        self.route_tools = route_tools
        self.tool_defs = deps.tools.definitions(route_tools) + request.client_tools
        self.transcript = self.messages = request.messages
        context = (ContextStep(deps.context, deps.router, request.plan, request.params, request.deadline,
                               deps.route_lookup, state.add_call, request.span) if deps.context is not None else None)
        self.context = context
        if context is not None:
            state.context = context.report
        self.cap = context.cap if context is not None else _unchanged
        # Streams name the answering model on every chunk: the renderer follows these announcements.
        self.announced = state.model
        self.resumed_from = ""  # the continuation this run resumes, named on its span events
        self.force_finalize = self.finalize = self.window_full = self.paused = False

    async def fit_window(self) -> list[Notice]:
        """The context guard before a call: the transcript made to fit, or the call made the finalize call."""
        assert self.context is not None
        state = self.state
        overflow, notices = await self.context.before_call(self.transcript, self.tool_defs,
                                                           first=state.iterations == 0 and state.tool_rounds == 0)
        self.window_full = overflow
        return self.noticed(notices)

    def model_request(self) -> ModelRequest:
        """The next call: the finalize call once the rounds are spent or the window is full."""
        request, state = self.request, self.state
        window_full = self.force_finalize or self.window_full  # the guard skipped tools for want of room
        finalize = self.finalize = window_full or state.tool_rounds >= request.max_iterations
        self.window_full = False
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
                            params=request.params, native=request.native)

    async def call_model(self) -> AsyncIterator[LoopEvent]:
        """One model call: its output passed on as it comes (a stream's batches; a whole answer's reasoning and
        text once it is in), then the answer accounted for and left in ``self.response``."""
        request, state, plan = self.request, self.state, self.plan
        model_request = self.model_request()
        attempts = state.attempts
        answer: Answer | None = None
        since = len(attempts)
        call_span = restore = None
        if self.span.recording:  # one attribute read when tracing is off
            call_span = self.span.model_call(plan.targets, model_request)
            outgoing = call_span.outgoing()  # None unless observability.propagate_to_providers
            restore = OUTGOING.set(outgoing) if outgoing is not None else None
        waiting = time.perf_counter()
        try:
            if request.stream:
                separate = state.text_emitted
                async for item in self.deps.router.stream(plan.targets, model_request, attempts, plan.retries,
                                                          request.deadline, self.stream_policy()):
                    if isinstance(item, Answer):
                        answer = item
                        continue
                    head = item[0]
                    opens = isinstance(head, Answering)  # the first batch of the target that committed
                    if isinstance(head, Answering):
                        self.announced = head.model
                    if any(isinstance(delta, TextDelta) for delta in item):
                        if separate:
                            separate = False
                            at = 1 if opens else 0  # the separator is text of the new call: after its announcement
                            item = [*item[:at], TextDelta(ITERATION_SEPARATOR), *item[at:]]
                        state.text_emitted = True
                    yield item
            else:
                answer = await self.deps.router.complete(plan.targets, model_request, attempts, plan.retries,
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
            for event in self.whole_output(answer):
                yield event
        self.account(answer)
        if request.stream and state.model != self.announced:
            self.announced = state.model  # a call that streamed nothing (tool calls only) still names its model
            yield Answering(self.announced)
        if self.context is not None:
            await self.context.observe(answer.target.label, answer.target.model, self.messages, self.tool_defs,
                                       answer.response.usage.prompt_tokens)
        self.response = answer.response

    def stream_policy(self) -> StreamPolicy:
        policy = self.plan.stream
        rescue = self.request.stream_rescue
        return policy if rescue is None or rescue is policy.rescue else replace(policy, rescue=rescue)

    def whole_output(self, answer: Answer) -> list[LoopEvent]:
        """A whole answer's reasoning (per block, signatures included) and text, apart from an earlier call's."""
        message = answer.response.message
        events: list[LoopEvent] = []
        reasoning = reasoning_deltas(message)
        if reasoning:
            events.append(reasoning)
        text = text_of(message.get("content"))
        if text:
            if self.state.text_emitted:
                events.append(TextDelta(ITERATION_SEPARATOR))
            self.state.text_emitted = True
            events.append(TextDelta(text))
        return events

    def account(self, answer: Answer) -> None:
        """An answered call in the state: its usage (a rescued stream's cut attempts too), target and model."""
        state, response = self.state, answer.response
        state.iterations += 1
        if answer.cut is not None:  # a rescued stream: its cut attempts produced (and billed) tokens too
            for label, usage in answer.cut:
                state.add_call(label, usage)
            self.span.event("loopgate.stream_rescue",
                            {f"loopgate.{k}": v for k, v in (answer.rescued or {}).items()})
        state.add_call(answer.target.label, response.usage)
        state.answered_by.append(answer.target.label)
        if "reasoning_content" in response.message:  # provenance for reasoning_passback: auto
            response.message.setdefault("reasoning_origin", answer.target.provider.name)
        state.model = response.model or answer.target.model

    def provider_paused(self, response: ModelResponse) -> bool:
        """The provider paused its own turn (a long server tool of its own): the next call continues the turn
        as it stands. A round of the loop's cap, so it cannot go on for ever."""
        if not response.unfinished or self.finalize or self.state.tool_rounds >= self.request.max_iterations:
            return False
        self.transcript.append(response.message)
        self.state.tool_rounds += 1
        return True

    def finish(self, response: ModelResponse) -> LoopResult:
        """The run's result: the answer's finish reason (``stop`` for calls the finalize call made anyway)."""
        state, calls = self.state, response.tool_calls
        metrics.LOOP_ITERATIONS.observe(state.iterations)
        result = LoopResult("completed", "stop" if calls else response.finish_reason, state.usage,
                            gateway_extension(state, "completed"), model=state.model,
                            stop_sequence=None if calls else response.stop_sequence)
        if self.request.on_finish is not None:
            self.request.on_finish(result)
        return result

    async def make_room(self, turn: Turn) -> list[LoopEvent]:
        """The context guard before a round: with no room for every result, the calls beyond it get a skipped
        result (server calls first keep their place) and the next call is the finalize call."""
        assert self.context is not None
        calls = len(turn.runnable) + len(turn.pending)
        room, notices = await self.context.before_tools(self.transcript, turn.assistant, self.tool_defs, calls)
        events: list[LoopEvent] = [*self.noticed(notices)]
        if room >= calls:
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

    def noticed(self, notices: list[Notice]) -> list[Notice]:
        """Context guard actions, each an event on the request's span (the continuation a resume continues)."""
        span = self.span
        if notices and span.recording:
            for notice in notices:
                attributes: dict[str, Any] = {f"loopgate.{key}": value for key, value in notice.detail.items()
                                              if isinstance(value, int | float | str)}
                if self.resumed_from:
                    attributes["loopgate.continuation_id"] = self.resumed_from
                span.event(f"loopgate.context.{notice.event}", attributes)
        return notices


def _is_forced(tool_choice: Any) -> bool:
    return tool_choice == "required" or isinstance(tool_choice, dict)


async def _unchanged(messages: list[Message]) -> list[Message]:
    return messages
