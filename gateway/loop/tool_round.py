"""One tool round of the loop: the model's calls sorted, room made for their results, the server tools
run, and then either a pause or the round paired into the transcript.

1. every call is classified (:func:`triage`): server tool, server tool needing approval, client tool,
   unknown; unknown tools get an error result, and in headless mode calls that would pause get a
   "denied (headless)" result;
2. the context guard may cut the round short (``LoopRun.make_room``): the calls beyond the room get a
   skipped result and the next call finalizes;
3. :func:`run_turn` runs the server tools (``tool_runs.run_tools``); if any call must wait for the
   client or a human, the loop pauses (``pausing.store_pause``: the continuation is stored first, and
   only then is the pause reported); otherwise the round goes through ``pairing.tool_turn`` into the
   transcript.

A resumed pause (``prologue.py``) completes its paused round through :func:`run_turn` too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.canonical import Message, ToolCall
from gateway.loop.events import Finished, LoopEvent
from gateway.loop.pairing import ToolResult, tool_turn
from gateway.loop.pausing import PendingCall, store_pause, waiting_calls
from gateway.loop.tool_runs import ExecuteHook, record, run_tools

if TYPE_CHECKING:
    from gateway.loop.engine import LoopRun
    from gateway.loop.state import LoopRequest


@dataclass(slots=True)
class Turn:
    """A round of tool calls: the model's message, the results it has, what runs now and what waits."""

    assistant: Message
    results: dict[str, ToolResult] = field(default_factory=dict)
    runnable: list[tuple[ToolCall, Any]] = field(default_factory=list)
    pending: list[PendingCall] = field(default_factory=list)
    # What the client said after its tool results on a resume (a Messages caller's text): after the round.
    follow_up: list[Message] = field(default_factory=list)


def headless_denial(name: str, reason: str) -> str:
    who = "a human's approval" if reason == "approval" else "the client to run it"
    return (f"Tool '{name}' was not run: it needs {who}, and this request runs headless with no one to "
            "answer. Continue without it.")


def client_tool_names(request: LoopRequest) -> set[str]:
    """The caller's tools by name (a native caller's as its own format declares them, typed ones too)."""
    names = {t.get("function", {}).get("name") for t in request.client_tools}
    if request.native is not None:
        names.update(t.get("name") for t in request.native.tools)
    return names


async def triage(run: LoopRun, assistant: Message, calls: list[ToolCall]) -> Turn:
    """Sort the model's calls: a server tool runs now, one needing approval or a client's waits; an unknown
    tool gets an error result, and headless, a call that would wait is denied (and audited)."""
    request, state = run.request, run.state
    turn = Turn(assistant)
    tools = run.deps.tools
    server_names = run.route_tools
    client_names: set[str] | None = None  # only a round with a call that is not a server tool looks
    for call in calls:
        name = call["function"]["name"]
        tool = tools.get(name) if name in server_names else None
        if tool is not None and tool.spec.approval != "required":
            turn.runnable.append((call, tool))
            continue
        if tool is None and client_names is None:
            client_names = client_tool_names(request)
        reason = "approval" if tool is not None else "client" if client_names and name in client_names else None
        if reason is None:
            available = ", ".join(sorted({*server_names, *(client_names or ())})) or "none"
            turn.results[call["id"]] = ToolResult("error", f"Unknown tool '{name}'. Available tools: {available}.")
            record(state.tool_records, call, "error", 0.0, "unknown")
        elif request.headless:
            turn.results[call["id"]] = ToolResult("denied", headless_denial(name, reason))
            state.headless_denials.append({"tool_call_id": call["id"], "name": name, "reason": reason})
            run.span.event("loopgate.denial", {"gen_ai.tool.name": name, "gen_ai.tool.call.id": call["id"],
                                               "loopgate.reason": reason})
            record(state.tool_records, call, "denied", 0.0, None if reason == "approval" else "client")
            await run.deps.audit(request.tenant, call, reason, request.key_id, request.key_name, request.plan.name)
        else:
            turn.pending.append(PendingCall(call, reason, tool.spec.approval_timeout_s if tool is not None else None))
    return turn


async def run_turn(run: LoopRun, turn: Turn, execute: ExecuteHook) -> AsyncIterator[LoopEvent]:
    """Run the round's server tools, then pause (``run.paused``: the pause is the last event) when a call
    waits for the client, a human or a user's answer, or pair the round into the transcript."""
    deps, state = run.deps, run.state
    asks = deps.asking(run.request) if deps.asking is not None else None
    try:
        async for event in run_tools(turn.runnable, execute, run.plan.tool_concurrency, turn.results,
                                     lambda c, s, e: record(state.tool_records, c, s, e), run.span,
                                     state.add_wait, asks):
            yield event
        turn.pending.extend(waiting_calls(asks))
        if turn.pending:
            run.paused = True
            yield Finished(await store_pause(run.request, deps, turn.assistant, turn.results, turn.pending, asks))
            return
    finally:
        if asks is not None:
            asks.abandon()
    run.transcript.extend(await run.cap(tool_turn(turn.assistant, turn.results)))
    run.transcript.extend(turn.follow_up)
    state.tool_rounds += 1
